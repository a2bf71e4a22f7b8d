"""`omni serve` hears speech: its own model pool lists the default transcription model, loads
it on the first request (from OMNI_HOME, converted there once) and answers the OpenAI SDK;
`omni ls` finds the transcription in the log afterwards."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from omni.runtime.transcription.default import DEFAULT_TRANSCRIPTION_ID
from tests.api.test_transcriptions import SENTENCE, heard
from tests.test_cli import omni, serving


def test_omni_serve_loads_whisper_on_demand(
    tiny_model_dir: Path, whisper_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_HOME", str(whisper_dir.parent.parent))
    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "the tests need espeak-ng (Debian's espeak-ng)"
    wav = tmp_path / "s.wav"
    subprocess.run([espeak, "-s", "150", "-w", str(wav), SENTENCE], check=True)
    db = tmp_path / "omni.db"
    with serving(tiny_model_dir, db) as (base, _):
        listed = httpx.get(f"{base}/v1/models", timeout=30).json()["data"]
        kinds = {m["id"]: (m["kind"], m["loaded"]) for m in listed}
        assert kinds[DEFAULT_TRANSCRIPTION_ID] == ("transcription", False)
        with OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as client:
            said = client.audio.transcriptions.create(
                model=DEFAULT_TRANSCRIPTION_ID, file=wav.open("rb")
            )
            assert heard(said.text) >= 0.8, said.text
            with pytest.raises(openai.BadRequestError) as err:
                client.audio.transcriptions.create(model="tiny-llama", file=wav.open("rb"))
            assert "not a transcription model" in str(err.value)
        listed = httpx.get(f"{base}/v1/models", timeout=30).json()["data"]
        assert {m["id"]: m["loaded"] for m in listed}[DEFAULT_TRANSCRIPTION_ID] is True
    shown = omni("ls", "--kind", "transcription", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert DEFAULT_TRANSCRIPTION_ID in shown.stdout and "completed" in shown.stdout
