"""POST /v1/images/generations where mflux cannot run: a platform MLX does not run on, and a
Mac or Linux without it (on Linux: the extra, then mflux without its pins), each a 501 in
OpenAI's shape that says why and what installs it, through the OpenAI SDK; with it, the body
is checked (a 400 naming the field) before the model is looked for. The engine itself:
tests/api/test_image_generation.py."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import httpx
import openai
import pytest

from tests.api._helpers import MODEL


def pretend(monkeypatch: pytest.MonkeyPatch, platform: str, mflux: bool) -> None:
    """Run as on `platform`, with mflux (the test install has it) or without it."""
    found = importlib.util.find_spec

    def spec(name: str, *args: Any) -> Any:
        return None if name.split(".")[0] == "mflux" else found(name, *args)

    monkeypatch.setattr(sys, "platform", platform)
    if not mflux:
        monkeypatch.setattr(importlib.util, "find_spec", spec)


@pytest.mark.parametrize(
    ("platform", "mflux", "says"),
    [
        ("win32", True, "images does not run on win32 (only linux, darwin: there, pip install"),
        ("darwin", False, "images needs mflux, which this install lacks: pip install"),
        ("linux", False, "lacks: pip install 'omni-mlx[images]' && pip install --no-deps 'mflux=="),
    ],
)
def test_where_mflux_cannot_run_it_is_a_501_with_the_install_command(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch, platform: str, mflux: bool, says: str
) -> None:
    pretend(monkeypatch, platform, mflux)
    with pytest.raises(openai.APIStatusError) as refused:
        client.images.generate(prompt="a red square", model="flux-schnell")
    assert refused.value.status_code == 501
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "feature_not_installed"
    assert says in error["message"] and "'omni-mlx[images]'" in error["message"]


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_with_mflux_the_body_is_checked_first(
    server: Any, monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    pretend(monkeypatch, platform, True)
    url = f"{server.base_url}/v1/images/generations"
    bad = httpx.post(url, json={"prompt": "x", "response_format": "url"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format"
    body = {"prompt": "x", "model": "no-such-model", "size": "64x64"}
    unknown = httpx.post(url, json=body, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    chat = httpx.post(url, json={**body, "model": MODEL}, timeout=30)
    assert chat.status_code == 400 and "not an image generation model" in chat.text
    unnamed = httpx.post(url, json={"prompt": "x"}, timeout=30)  # and it serves none
    assert unnamed.status_code == 400 and "none is served" in unnamed.text
