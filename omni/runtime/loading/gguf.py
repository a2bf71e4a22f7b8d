"""Convert a llama-family GGUF file into an mlx-lm model folder."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import mlx.core as mx

from omni.errors import ModelLoadError
from omni.runtime.loading.gguf_layout import check_layout
from omni.runtime.loading.gguf_tokenizer import build_tokenizer

Progress = Callable[[str], None]

# GGUF tensor base names -> mlx-lm llama module paths.
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def convert_gguf(gguf_path: Path, out_dir: Path, progress: Progress | None = None) -> Path:
    """Write an mlx-lm folder for `gguf_path` at `out_dir` (atomically) and return it."""
    say = progress or (lambda _msg: None)
    if out_dir.exists():
        raise ModelLoadError(f"cannot convert {gguf_path.name}: {out_dir} already exists")
    say(f"reading {gguf_path.name}")
    tensors, meta = _read(gguf_path)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"unsupported GGUF architecture {arch!r} in {gguf_path.name}")
    weights = _rename(tensors)
    config = _config(meta, weights)
    _check_complete(weights, int(config["num_hidden_layers"]))
    tokenizer = build_tokenizer(meta, int(config["max_position_embeddings"]))
    say(f"writing mlx model to {out_dir}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tokenizer.save_pretrained(str(tmp))
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the published folder should not be
        _publish(tmp, out_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ModelLoadError(f"cannot write converted model to {out_dir}: {exc}") from exc
        raise
    return out_dir


def _publish(tmp: Path, out_dir: Path) -> None:
    # A rename is atomic: readers see no folder or a whole one. If a concurrent
    # conversion won the race, keep its result.
    try:
        tmp.rename(out_dir)
    except OSError:
        if not (out_dir / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _read(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    # Validate the layout first: MLX's reader can crash on a malformed header.
    check_layout(path)
    try:
        loaded = mx.load(str(path), format="gguf", return_metadata=True)
    except (RuntimeError, ValueError, OSError) as exc:
        detail = str(exc).splitlines()[0].replace("[load_gguf] ", "") if str(exc) else "unreadable"
        raise ModelLoadError(f"cannot read GGUF file {path.name}: {detail}") from exc
    return cast(tuple[dict[str, mx.array], dict[str, Any]], loaded)


def _rename(tensors: dict[str, mx.array]) -> dict[str, mx.array]:
    out: dict[str, mx.array] = {}
    for name, value in tensors.items():
        parts = name.split(".")
        if parts[0] == "blk" and len(parts) >= 4 and parts[2] in _LAYER:
            new = f"model.layers.{parts[1]}.{_LAYER[parts[2]]}.{'.'.join(parts[3:])}"
        elif parts[0] in _TOP and len(parts) >= 2:
            new = f"{_TOP[parts[0]]}.{'.'.join(parts[1:])}"
        elif parts[0] == "rope_freqs":
            raise ModelLoadError("GGUF tensor 'rope_freqs' (Llama 3.1 RoPE) is not supported")
        else:
            raise ModelLoadError(f"unexpected tensor {name!r} in a llama GGUF file")
        out[new] = value
    return out


def _check_complete(weights: dict[str, mx.array], layers: int) -> None:
    # Refuse here rather than as a strict-load error from mlx-lm later.
    for n in range(layers):
        for module in _LAYER.values():
            if f"model.layers.{n}.{module}.weight" not in weights:
                raise ModelLoadError(f"GGUF file lacks the weights of layer {n} {module}")
    if "model.norm.weight" not in weights:
        raise ModelLoadError("GGUF file lacks the output_norm tensor")


def _num(meta: dict[str, Any], key: str, default: float | None = None) -> Any:
    value = meta.get(key)
    if value is None:
        if default is None:
            raise ModelLoadError(f"GGUF metadata lacks {key!r}")
        return default
    if isinstance(value, mx.array):
        if value.ndim != 0:
            raise ModelLoadError(f"GGUF metadata {key!r} varies per layer, which is not supported")
        return value.item()
    return value


def _config(meta: dict[str, Any], weights: dict[str, mx.array]) -> dict[str, Any]:
    heads = int(_num(meta, "llama.attention.head_count"))
    hidden = int(_num(meta, "llama.embedding_length"))
    head_dim = int(_num(meta, "llama.attention.key_length", hidden // heads))
    if int(_num(meta, "llama.rope.dimension_count", head_dim)) != head_dim:
        raise ModelLoadError("GGUF models with partial rotary embeddings are not supported")
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(_num(meta, "llama.block_count")),
        "intermediate_size": int(_num(meta, "llama.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_num(meta, "llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _f32(_num(meta, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(_num(meta, "llama.rope.freq_base", 10000.0)),
        # llama.cpp's converter permutes q/k rows for interleaved RoPE.
        "rope_traditional": True,
        "vocab_size": int(_embedding(weights).shape[0]),
        "max_position_embeddings": int(_num(meta, "llama.context_length", 4096)),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "attention_bias": "model.layers.0.self_attn.q_proj.bias" in weights,
        "mlp_bias": "model.layers.0.mlp.up_proj.bias" in weights,
    }
    for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos")):
        if f"tokenizer.ggml.{name}_token_id" in meta:
            config[key] = int(_num(meta, f"tokenizer.ggml.{name}_token_id"))
    scaling = meta.get("llama.rope.scaling.type", "none")
    if scaling == "linear":
        factor = float(_num(meta, "llama.rope.scaling.factor"))
        config["rope_scaling"] = {"type": "linear", "factor": factor}
    elif scaling != "none":
        raise ModelLoadError(f"unsupported GGUF RoPE scaling {scaling!r}")
    quant = _quantization(weights, config)
    if quant:
        config["quantization"] = quant
    return config


def _embedding(weights: dict[str, mx.array]) -> mx.array:
    if "model.embed_tokens.weight" not in weights:
        raise ModelLoadError("GGUF file lacks the token_embd tensor")
    return weights["model.embed_tokens.weight"]


def _f32(value: float) -> float:
    # GGUF stores float32: 1e-5 reads back as 9.9999997e-06; keep config.json readable.
    return float(f"{value:.7g}")


def _in_features(module: str, config: dict[str, Any]) -> int:
    if module.endswith("o_proj"):
        return int(config["num_attention_heads"] * config["head_dim"])
    if module.endswith("down_proj"):
        return int(config["intermediate_size"])
    return int(config["hidden_size"])


def _quantization(weights: dict[str, mx.array], config: dict[str, Any]) -> dict[str, Any]:
    """Derive each quantized module's bits and group size from its packed shapes."""
    params: dict[str, tuple[int, int]] = {}
    for name in weights:
        if not name.endswith(".scales"):
            continue
        module = name.removesuffix(".scales")
        packed, groups = weights[f"{module}.weight"].shape[-1], weights[name].shape[-1]
        in_features = _in_features(module, config)
        bits, group_size = packed * 32 // in_features, in_features // groups
        if bits * in_features != packed * 32 or group_size * groups != in_features:
            raise ModelLoadError(f"GGUF tensor for {module} has an unexpected quantized shape")
        params[module] = (bits, group_size)
    if not params:
        return {}
    (bits, group_size), _ = Counter(params.values()).most_common(1)[0]
    quant: dict[str, Any] = {"group_size": group_size, "bits": bits}
    # Mixed files: mlx-lm reads per-module overrides keyed by module path.
    for module, (b, g) in sorted(params.items()):
        if (b, g) != (bits, group_size):
            quant[module] = {"group_size": g, "bits": b}
    return quant
