"""The key of a model as run, under which the disk tier keeps its KV caches: a cache is reused
only by the very model that computed it, so the key changes with any file of the model, its
chat template, its KV layout or the weights as they run (dtype, quantization, adapters)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# The files of a model folder that make what it computes: weights, configs, tokenizer,
# template (a README or an image does not).
SUFFIXES = {".safetensors", ".bin", ".gguf", ".npz", ".json", ".jinja", ".model", ".tiktoken",
            ".txt", ".py"}  # fmt: skip
ARGS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "hidden_size", "sliding_window", "max_kv_size")  # fmt: skip


def model_key(path: str, model: Any, tokenizer: Any, adapter: str | None = None) -> str:
    """A short hex digest of the model at `path` as run (with `adapter`, if any)."""
    facts = {
        "files": _files(path),
        "adapter": None if adapter is None else _files(adapter),
        "template": _template(tokenizer),
        "layout": kv_layout(model),
    }
    text = json.dumps(facts, sort_keys=True, default=str).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def kv_layout(model: Any) -> dict[str, Any]:
    """What shapes a KV cache of `model`: its layers, cache classes, attention geometry and
    the dtypes and shapes of its weights as run."""
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import make_prompt_cache

    args = getattr(model, "args", None)
    geometry = {name: getattr(args, name, None) for name in ARGS}
    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    weights = hashlib.sha256()
    for name, value in params:
        weights.update(f"{name}:{value.dtype}:{tuple(value.shape)};".encode())
    return {
        "layers": len(getattr(model, "layers", [])),
        "caches": [type(c).__name__ for c in make_prompt_cache(model)],
        "geometry": geometry,
        "dtypes": sorted({str(v.dtype) for _, v in params}),
        "weights": weights.hexdigest(),
    }


def _files(path: str) -> list[tuple[str, int, int]] | str:
    """Each model file by name, size and mtime (a folder); the name itself otherwise."""
    folder = Path(path)
    if not folder.is_dir():
        return path
    out = []
    for file in sorted(folder.rglob("*")):
        if file.suffix in SUFFIXES and file.is_file() and not file.name.startswith("."):
            stat = file.stat()
            out.append((str(file.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return out


def _template(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    return None if template is None else json.dumps(template, sort_keys=True)
