"""Finding the models a server can load: the defaults, OMNI_HOME/models (converted GGUFs and
fetched defaults), every mlx-lm folder and .gguf file under each --models-dir, and the MLX
models already in the Hugging Face cache (read offline). Scanning reads files only: no model
is loaded, nothing imports MLX."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from omni.catalogue import ModelEntry, ModelKind, Origin, size_on_disk
from omni.runtime.embeddings.default import DEFAULT_EMBEDDING_ID, default_embedding_dir
from omni.runtime.loading import default_model
from omni.runtime.transcription.default import (
    DEFAULT_TRANSCRIPTION_ID,
    default_transcription_dir,
)

log = logging.getLogger(__name__)

_CONVERTED = re.compile(r"^(?P<stem>.+)-[0-9a-f]{12}$")  # source.gguf_cache_dir's names
# Architectures that embed rather than generate (mlx-embeddings' families).
_ENCODERS = ("BertModel", "XLMRobertaModel", "ModernBertModel", "NomicBertModel")
# mlx-audio's text-to-speech families (a config's model_type) that speak rather than generate.
_SPEAKERS = ("kokoro", "kitten_tts", "kitten", "melotts", "pocket_tts", "soprano", "spark")
_DEPTH = 3  # how deep under a --models-dir a model may sit
# Diffusers pipelines (a snapshot's model_index.json) that mflux draws with.
_DRAWERS = ("Flux2KleinPipeline",)


def scan(
    home: Path,
    models_dirs: Iterable[Path] = (),
    hf_home: Path | None = None,
    *,
    named: ModelEntry | None = None,
) -> list[ModelEntry]:
    """Every model found, the defaults first; `named`: the one --model names (first of all).
    An id seen twice keeps its first entry."""
    found: dict[str, ModelEntry] = {}

    def add(entries: Iterable[ModelEntry]) -> None:
        for entry in entries:
            found.setdefault(entry.id, entry)

    if named is not None:
        add([named])
    add(_defaults(home))
    add(_home(home))
    for folder in models_dirs:
        add(_models_dir(folder))
    if hf_home is not None:
        add(_hf_cache(hf_home))
    return list(found.values())


def find(name: str, entries: Iterable[ModelEntry], aliases: Mapping[str, str]) -> ModelEntry | None:
    """The entry `name` names: an id, an alias, or an id in other case (Qwen3-8B for qwen3-8b,
    where only one matches); None: none of them."""
    by_id = {entry.id: entry for entry in entries}
    name = aliases.get(name, name)
    if name in by_id:
        return by_id[name]
    folded = [entry for entry in by_id.values() if entry.id.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def cached_repo(hf: Path, repo_id: str) -> ModelEntry | None:
    """Repo `repo_id` (owner/name) as the Hugging Face cache under `hf` holds it, else None."""
    snapshot = _snapshot(hf / "hub" / f"models--{repo_id.replace('/', '--')}")
    return None if snapshot is None else entry_for(snapshot, "hf-cache", repo_id)


def hf_home() -> Path:
    """The Hugging Face cache's home, as huggingface_hub finds it."""
    if value := os.environ.get("HF_HOME"):
        return Path(value).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "huggingface"


def entry_for(path: Path, origin: Origin, model_id: str | None = None) -> ModelEntry | None:
    """The entry of an mlx-lm folder or a .gguf file, else None (not a model)."""
    if path.is_file() and path.suffix.lower() == ".gguf":
        return ModelEntry(
            model_id or path.stem.lower(), "chat", str(path), origin, size_on_disk(path)
        )
    if draws_images(path):
        return ModelEntry(
            model_id or path.name.lower(), "image", str(path), origin, size_on_disk(path)
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        return None
    kind = model_kind(path)
    if kind is None:
        return None
    name = model_id or path.name.lower()
    vision = kind == "chat" and takes_images(path)
    return ModelEntry(name, kind, str(path), origin, size_on_disk(path), vision=vision)


def draws_images(folder: Path) -> bool:
    """An image generation model's folder: a diffusers snapshot of a pipeline mflux loads
    (model_index.json), its transformer's weights there."""
    try:
        index = json.loads((folder / "model_index.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(index, dict)
        and index.get("_class_name") in _DRAWERS
        and any((folder / "transformer").glob("*.safetensors"))
    )


def takes_images(folder: Path) -> bool:
    """A vision-language model's folder: its config has a vision tower's (HF's layout for
    LLaVA, Qwen2-VL, Idefics, Gemma 3, PaliGemma, ...)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("vision_config"), dict)


def model_kind(folder: Path) -> ModelKind | None:
    """chat, embedding, speech or transcription, from the folder's config; None: weights
    missing or unreadable."""
    if not any(folder.glob("*.safetensors")):
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if config.get("model_type") == "whisper":  # mlx-audio's Whisper layout
        return "transcription"
    architectures = config.get("architectures") or []
    if (folder / "modules.json").is_file() or any(a in _ENCODERS for a in architectures):
        return "embedding"
    if config.get("model_type") in _SPEAKERS:
        return "speech"
    return "chat"


def _defaults(home: Path) -> Iterator[ModelEntry]:
    chat = default_model.default_model_dir(home)
    yield ModelEntry(default_model.DEFAULT_MODEL_ID, "chat", "", "default", size_on_disk(chat))
    embedding = default_embedding_dir(home)
    yield ModelEntry(DEFAULT_EMBEDDING_ID, "embedding", "", "default", size_on_disk(embedding))
    heard = default_transcription_dir(home)
    yield ModelEntry(DEFAULT_TRANSCRIPTION_ID, "transcription", "", "default", size_on_disk(heard))


def _home(home: Path) -> Iterator[ModelEntry]:
    """OMNI_HOME/models: GGUF conversions (by the file's name) and what else was put there."""
    root = home / "models"
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        if folder.name.startswith("."):
            continue
        converted = _CONVERTED.match(folder.name)
        entry = entry_for(folder, "home", converted["stem"] if converted else None)
        if entry is not None:
            yield entry


def _models_dir(root: Path, depth: int = 0) -> Iterator[ModelEntry]:
    if not root.is_dir():
        log.warning("--models-dir %s is not a folder", root)
        return
    for path in sorted(root.iterdir()):
        if path.name.startswith("."):
            continue
        entry = entry_for(path, "models-dir")
        if entry is not None:
            yield entry
        elif path.is_dir() and depth + 1 < _DEPTH:
            yield from _models_dir(path, depth + 1)


def _hf_cache(home: Path) -> Iterator[ModelEntry]:
    """The cache's model repos (hub/models--owner--name), each by its repo id, at the revision
    `refs/main` names (else the newest snapshot)."""
    hub = home / "hub"
    if not hub.is_dir():
        return
    for repo in sorted(hub.glob("models--*--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/", 1)
        snapshot = _snapshot(repo)
        if snapshot is not None and (entry := entry_for(snapshot, "hf-cache", repo_id)):
            yield entry


def _snapshot(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file() and (chosen := repo / "snapshots" / ref.read_text().strip()).is_dir():
        return chosen
    snapshots = [p for p in (repo / "snapshots").glob("*") if p.is_dir()]
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None
