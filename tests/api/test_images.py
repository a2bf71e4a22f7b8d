"""POST /v1/images/generations where mflux cannot run: Linux, whatever is installed (its wheels
pin MLX's CUDA build there), and a Mac without the extra, each a 501 in OpenAI's shape that
says why and what installs it, through the OpenAI SDK; on a Mac with it, the body is checked
(a 400 naming the field) before the model is looked for."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import httpx
import openai
import pytest

from tests.api._helpers import MODEL


def pretend(monkeypatch: pytest.MonkeyPatch, platform: str, mflux: bool) -> None:
    found = importlib.util.find_spec

    def spec(name: str, *args: Any) -> Any:
        if name == "mflux":
            return found("json") if mflux else None  # any spec: the module is there
        return found(name, *args)

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(importlib.util, "find_spec", spec)


@pytest.mark.parametrize(
    ("platform", "mflux", "says"),
    [
        ("linux", True, "images does not run on linux (only darwin: there, pip install"),
        ("darwin", False, "images needs mflux, which this install lacks: pip install"),
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


def test_on_a_mac_with_mflux_the_body_is_checked_first(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend(monkeypatch, "darwin", True)
    url = f"{server.base_url}/v1/images/generations"
    bad = httpx.post(url, json={"prompt": "x", "response_format": "url"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format"
    unknown = httpx.post(url, json={"prompt": "x", "model": MODEL, "size": "64x64"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
