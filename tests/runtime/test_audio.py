"""Uploads decoded by PyAV to 16 kHz mono float32: wav, and the same speech encoded as mp3,
m4a (AAC), webm (Opus) and flac, all the same length; what is not audio is a 400."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import av
import pytest

from omni.errors import InvalidRequest
from omni.runtime.platform import blas
from omni.runtime.transcription.audio import SAMPLE_RATE, decode


@pytest.fixture(scope="module")
def wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "the tests need espeak-ng (Debian's espeak-ng)"
    path = tmp_path_factory.mktemp("audio") / "said.wav"
    subprocess.run([espeak, "-w", str(path), "one two three"], check=True)
    return path


def encoded(wav: Path, container: str, codec: str, rate: int) -> bytes:
    out = io.BytesIO()
    with av.open(str(wav)) as src, av.open(out, "w", format=container) as dst:
        stream = dst.add_stream(codec, rate=rate)
        for frame in src.decode(audio=0):
            frame.pts = None
            for packet in stream.encode(frame):
                dst.mux(packet)
        for packet in stream.encode(None):
            dst.mux(packet)
    return out.getvalue()


@pytest.mark.parametrize(
    ("container", "codec", "rate", "found"),
    [
        ("mp3", "mp3", 22050, "mp3"),
        ("ipod", "aac", 22050, "mov,mp4,m4a,3gp,3g2,mj2"),
        ("webm", "libopus", 48000, "matroska,webm"),
        ("flac", "flac", 22050, "flac"),
    ],
)
def test_each_format_decodes_to_the_same_speech(
    wav: Path, container: str, codec: str, rate: int, found: str
) -> None:
    plain = decode(wav.read_bytes(), "said.wav")
    assert plain.format == "wav" and len(plain.samples) == 4 * round(plain.seconds * SAMPLE_RATE)
    other = decode(encoded(wav, container, codec, rate), f"said.{container}")
    assert other.format == found
    assert abs(other.seconds - plain.seconds) < 0.1  # encoders pad a frame or so


def test_what_is_not_audio_is_a_400_naming_the_file() -> None:
    with pytest.raises(InvalidRequest) as err:
        decode(b"%PDF-1.7 not a sound" * 64, "report.pdf")
    assert err.value.status == 400 and err.value.param == "file"
    assert "report.pdf" in err.value.message


def test_whisper_loads_without_mlx_audios_playback(whisper_dir: Path) -> None:
    """mlx-audio's playback needs PortAudio (sounddevice), which a server may lack: loading
    and running Whisper never imports it. The probe preloads the engine's BLAS, as the model's
    process does (MLX's own reference BLAS makes its window ~4x slower)."""
    import sys

    probe = (
        "import sys\n"
        "from omni.ports.transcription import TranscribeOptions\n"
        "from omni.runtime.transcription.worker import load, transcribe\n"
        f"model = load({str(whisper_dir)!r})\n"
        "transcribe(model, bytes(4 * 16000), TranscribeOptions())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sounddevice', 'mlx_audio.tts'))))\n"
    )
    env = dict(os.environ)
    if library := blas.preload(blas.AUTO):
        env["LD_PRELOAD"] = library
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
