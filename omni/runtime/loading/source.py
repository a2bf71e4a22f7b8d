"""Resolve the --model argument into something mlx_lm.load can open, plus a stable id."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omni.errors import ModelLoadError
from omni.runtime.loading import default_model, gguf

Progress = Callable[[str], None]

# Hugging Face repo ids: exactly "owner/name" of word characters, dots and dashes.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


@dataclass(frozen=True)
class ModelSource:
    path: str  # a local folder, or a Hugging Face repo id, for mlx_lm.load
    model_id: str  # the stable id served at /v1/models
    adapter: str | None = None  # an mlx-lm LoRA adapter folder loaded with the weights
    draft: str | None = None  # a draft model's folder (speculative decoding)


def resolve_model(spec: str | None, home: Path, progress: Progress | None = None) -> ModelSource:
    """Map None, a folder, a .gguf file or an HF repo id to a ModelSource (converting GGUF once)."""
    if not spec or (spec == default_model.DEFAULT_MODEL_ID and not Path(spec).exists()):
        folder = default_model.ensure_default_model(home, progress)
        return ModelSource(str(folder), default_model.DEFAULT_MODEL_ID)
    local = Path(spec).expanduser()
    if local.is_dir():
        folder = local.resolve()
        return ModelSource(str(folder), folder.name.lower())
    if local.is_file():
        if local.suffix.lower() != ".gguf":
            raise ModelLoadError(f"not a model folder or .gguf file: {spec}")
        return _from_gguf(local.resolve(), home, progress)
    if is_repo_id(spec):
        return ModelSource(spec, spec)
    raise ModelLoadError(f"model not found: {spec}")


def is_repo_id(spec: str) -> bool:
    """`spec` has a Hugging Face repo id's shape (owner/name), and is no .gguf file's name."""
    return bool(_REPO_ID.fullmatch(spec)) and not spec.lower().endswith(".gguf")


def gguf_cache_dir(gguf_path: Path, home: Path) -> Path:
    """Where a GGUF file's conversion lives; a changed file (size or mtime) gets a new folder."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return home / "models" / f"{gguf_path.stem.lower()}-{key}"


def _from_gguf(gguf_path: Path, home: Path, progress: Progress | None) -> ModelSource:
    folder = gguf_cache_dir(gguf_path, home)
    if not (folder / "config.json").exists():
        gguf.convert_gguf(gguf_path, folder, progress)
    return ModelSource(str(folder), gguf_path.stem.lower())
