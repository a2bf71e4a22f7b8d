"""The disk tier's folder, without MLX: under a root, a folder per model key; in it, per entry, a
data file (`<name>.safetensors`, mlx-lm's prompt cache format) and its sidecar (`<name>.json`),
and `model.json`, the model the key stands for. An entry exists only once its sidecar does: both
are written to a temporary file first (`*.tmp`), synced, then renamed. `omni cache` reads and
clears this folder; kv_disk writes it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

FORMAT = 1
DATA, SIDECAR, TMP = ".safetensors", ".json", ".tmp"
MODEL = "model.json"


@dataclass(frozen=True, slots=True)
class Sidecar:
    """What an entry's data file holds, and its checksum."""

    model_key: str
    namespace: str
    tokens: tuple[int, ...]
    nbytes: int  # the data file's size
    sha256: str  # of the data file
    created: float
    classes: tuple[str, ...]  # the cache class of each layer
    keep_hint: bool = False
    hits: int = 0
    format: int = FORMAT

    def dumps(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def loads(cls, text: bytes) -> Sidecar:
        """The sidecar in `text`; ValueError if it is not one of this format."""
        try:
            raw: dict[str, Any] = json.loads(text)
            side = cls(**{**raw, "tokens": tuple(raw["tokens"]),
                          "classes": tuple(raw["classes"])})  # fmt: skip
        except (TypeError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a sidecar ({exc})") from None
        if side.format != FORMAT or not all(type(t) is int for t in side.tokens):
            raise ValueError("not a sidecar of this format")
        return side

    def used(self) -> Sidecar:
        return replace(self, hits=self.hits + 1)


def entry_name(namespace: str, tokens: tuple[int, ...] | list[int]) -> str:
    """An entry's file name (less its suffix): the same prompt of the same namespace is one
    entry, whichever process writes it."""
    text = json.dumps([namespace, list(tokens)], separators=(",", ":")).encode()
    return hashlib.sha256(text).hexdigest()[:32]


def temporary(path: Path) -> Path:
    """A temporary name for `path`, in its folder, unique to this writer."""
    return path.with_name(f"{path.name}.{os.getpid()}-{os.urandom(4).hex()}{TMP}")


def write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path`, all or nothing: written aside, synced, renamed."""
    tmp = temporary(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_model(folder: Path, key: str, model_id: str, path: str) -> None:
    """`model.json` in a key's folder: what `omni cache ls` names the key by."""
    facts = {"key": key, "id": model_id, "path": path, "written": time.time()}
    write_atomic(folder / MODEL, json.dumps(facts).encode())


@dataclass(frozen=True, slots=True)
class Listed:
    """An entry as `omni cache` shows it."""

    key: str
    model: str  # the model's id (or path) from model.json, "?" without one
    side: Sidecar
    last_use: float  # the sidecar's mtime: written, or last loaded


def model_of(folder: Path) -> dict[str, Any]:
    """A key folder's model.json, or {} if it has none that reads."""
    try:
        facts = json.loads((folder / MODEL).read_bytes())
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def key_folders(root: Path, model: str | None = None) -> list[Path]:
    """The key folders under `root`; `model`: only those of the model of that id, path or key."""
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        facts = model_of(folder)
        names = {folder.name, str(facts.get("id")), str(facts.get("path"))}
        if model is None or model in names:
            out.append(folder)
    return out


def listing(root: Path, model: str | None = None) -> list[Listed]:
    """Every entry whose sidecar reads, of every key (or of `model`'s)."""
    out = []
    for folder in key_folders(root, model):
        facts = model_of(folder)
        name = str(facts.get("id") or facts.get("path") or "?")
        for path in sorted(folder.glob(f"*{SIDECAR}")):
            if path.name == MODEL:
                continue
            try:
                side = Sidecar.loads(path.read_bytes())
                out.append(Listed(folder.name, name, side, path.stat().st_mtime))
            except (OSError, ValueError):
                continue
    return out


def clear(root: Path, model: str | None = None) -> int:
    """Remove every entry (or `model`'s), their key folders with them; how many entries."""
    count = 0
    for folder in key_folders(root, model):
        for path in folder.iterdir():
            if path.name.endswith(SIDECAR) and path.name != MODEL:
                count += 1
            path.unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:  # a server wrote into it meanwhile
            pass
    return count
