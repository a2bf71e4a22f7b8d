"""Whisper heard window by window (omni.runtime.transcription.windows) gives what mlx-audio's own
Model.generate gives for the same recording: on ~34 s that espeak-ng speaks (two windows),
the same segments, timestamps and text. Run in a process of its own with the engine's BLAS
preloaded, as the model's process is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from omni.runtime.platform import blas
from tests.api.test_transcriptions import PASSAGE

PROBE = """
import json, sys
import mlx.core as mx, numpy as np
from pathlib import Path
from omni.ports.transcription import TranscribeOptions
from omni.runtime.transcription.audio import decode
from omni.runtime.transcription.worker import FALLBACK, _plain, hear, load, segments
model = load(sys.argv[1])
heard = decode(Path(sys.argv[2]).read_bytes(), "passage.wav")
windows = [segments(w) for w in hear(model, heard.samples, TranscribeOptions())]
out = model.generate(mx.array(np.frombuffer(heard.samples, dtype="<f4")), language="en",
                     temperature=FALLBACK, fp16=False)
theirs = [_plain(s) for s in out.segments if s.get("text")]
print(json.dumps({"windows": windows, "theirs": theirs, "text": out.text.strip()}))
"""


def test_the_windows_join_into_generates_segments(whisper_dir: Path, tmp_path: Path) -> None:
    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "the tests need espeak-ng (Debian's espeak-ng)"
    wav = tmp_path / "passage.wav"
    subprocess.run([espeak, "-s", "150", "-w", str(wav), PASSAGE], check=True)
    env = dict(os.environ)
    if library := blas.preload(blas.AUTO):
        env["LD_PRELOAD"] = library
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(whisper_dir), str(wav)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    windows, theirs = found["windows"], found["theirs"]
    assert len(windows) == 2 and all(windows)
    assert [s for w in windows for s in w] == theirs
    assert "".join(s["text"] for s in theirs).strip() == found["text"]
