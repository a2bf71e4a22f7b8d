"""Without the `audio` extra, /v1/audio/transcriptions and /translations answer 501 with the
install command, before reading the upload (the OpenAI SDK against a real server)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server import running


@pytest.mark.parametrize("missing", ["mlx_audio", "av"])
def test_a_501_names_the_extra(
    tiny_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else found(name, *a)
    )
    with running(tiny_engine, tmp_path / "omni.db") as (srv, client):
        for create in (client.audio.transcriptions.create, client.audio.translations.create):
            with pytest.raises(openai.APIStatusError) as err:
                create(model="whisper-1", file=("s.wav", b"RIFF...."))
            assert err.value.status_code == 501
            body = err.value.body
            assert isinstance(body, dict) and body["code"] == "feature_not_installed"
            assert "pip install 'omni-mlx[audio]'" in body["message"] and missing in body["message"]
        listed = httpx.get(f"{srv.base_url}/v1/features").json()["data"]
    features = {f["name"]: f for f in listed}
    assert features["transcription"]["install"] == "pip install 'omni-mlx[audio]'"
