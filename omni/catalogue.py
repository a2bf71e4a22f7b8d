"""The model catalogue's entries: every model this server can load, found on disk or known
by name (the defaults, fetched from PyPI on first use). A leaf: the runtime finds and loads
them (omni.runtime.loading.catalogue), the service keeps the loaded ones (omni.service.models)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

GB = 1 << 30  # sizes are bytes; flags and messages give them in GB

ModelKind = Literal["chat", "embedding", "speech", "transcription", "image"]
# Where an entry was found: a built-in default, OMNI_HOME/models, a --models-dir, the
# Hugging Face cache, or named on the command line (--model, a repo id).
Origin = Literal["default", "home", "models-dir", "hf-cache", "named"]


@dataclass(frozen=True, slots=True)
class ModelEntry:
    id: str  # stable, as /v1/models lists it and requests name it
    kind: ModelKind
    path: str  # a folder or a .gguf file to load from, or a repo id; "" for a default
    origin: Origin
    size_bytes: int | None = None  # on disk; None until fetched (a default) or unknown
    adapter: str = ""  # LoRA adapters loaded with the weights (an mlx-lm adapter folder)
    draft: str = ""  # a draft model (its catalogue id), for speculative decoding
    draft_path: str = ""  # where it loads from (a folder, a .gguf, a repo id or a default's id)
    base: str = ""  # the id of the model an adapter or a draft model is loaded with
    vision: bool = False  # a vision-language model: it takes images


def size_on_disk(path: Path) -> int | None:
    """Bytes on disk (links followed: the HF cache's snapshots link to its blobs); None: no
    such file or folder."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
