"""The dashboard over HTTP (GET /inspect/dashboard, GET /inspect/api/trends): its page and
uPlot's files from the package, the window and step refused in the OpenAI error shape, each
key's figures its own, and the server's samples of its loaded models. The buckets themselves
are tested in tests/inspect/test_trends.py; the page in a browser in
test_inspector_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._browser import keyed_server
from tests.api._helpers import MODEL
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24
KEY_OPS = "sk-ops-" + "o" * 24


@pytest.fixture(scope="module")
def keyed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("trends-keyed") / "omni.db"
    srv = keyed_server(tiny_engine, db, {"alice": KEY_A, "bob": KEY_B, "ops": KEY_OPS}, ("ops",))
    yield srv
    srv.stop()


def test_the_page_and_uplot_come_from_the_package(http: httpx.Client) -> None:
    page = http.get("/inspect/dashboard", headers={"authorization": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name in ["uPlot.iife.min.js", "uPlot.min.css", "dashboard.js", "dashboard.css"]:
        got = http.get(f"/inspect/static/{name}", headers={"authorization": ""})
        assert got.status_code == 200 and got.content, name
        assert f'/inspect/static/{name}"' in page.text, name
    assert "/inspect/dashboard" in http.get("/inspect").text  # linked from the list


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"window": "2h"}, "window"),
        ({"step": "abc"}, "step"),
        ({"step": "1"}, "step"),  # finer than the samples
        ({"window": "7d", "step": "60"}, "step"),  # 10,080 buckets
        ({"window": "15m", "step": "3600"}, "step"),  # a step wider than the window
    ],
)
def test_a_window_or_step_without_meaning_is_a_400(
    http: httpx.Client, query: dict[str, str], param: str
) -> None:
    refused = http.get("/inspect/api/trends", params=query)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"]


def test_the_figures_and_the_samples(client: OpenAI, http: httpx.Client) -> None:
    client.responses.create(model=MODEL, input="count me", max_output_tokens=5)
    body = http.get("/inspect/api/trends", params={"window": "15m", "step": "30"}).json()
    assert body["object"] == "inspect.trends" and body["step_s"] == 30
    assert len(body["time"]) == len(body["requests_per_min"]) == len(body["runtime"]["queued"])
    assert sum(body["requests_per_min"]) >= 2.0  # one request in 30 s: 2 a minute
    assert sum(body["output_tokens_per_s"]) > 0 and MODEL in body["models"]
    assert any(v is not None for v in body["ttft_ms_p50"])
    runtime = body["runtime"]
    assert runtime["loaded_now"] == [MODEL]
    assert max(v or 0 for v in runtime["loaded_models"]) == 1  # sampled since it started
    assert body["scoped_to"] is None  # no keys: every row, and an owner may be chosen
    other = http.get("/inspect/api/trends", params={"window": "15m", "model": "no-such"}).json()
    assert sum(other["requests_per_min"]) == 0 and other["runtime"]["loaded_now"] == [MODEL]
    assert all(v in (None, 0) for v in other["runtime"]["loaded_models"])


def test_a_key_sees_only_its_own_figures(keyed: ServerThread) -> None:
    for key, made in ((KEY_A, 1), (KEY_B, 2)):
        with OpenAI(base_url=f"{keyed.base_url}/v1", api_key=key, max_retries=0) as sdk:
            for _ in range(made):
                sdk.responses.create(model=MODEL, input="mine", max_output_tokens=3)
    with httpx.Client(base_url=keyed.base_url, timeout=30) as raw:
        assert raw.get("/inspect/api/trends").status_code == 401
        as_alice = {"authorization": f"Bearer {KEY_A}"}
        params = {"window": "1h", "step": "3600", "owner": "bob"}  # not hers to choose
        alice = raw.get("/inspect/api/trends", params=params, headers=as_alice).json()
        as_ops = {"authorization": f"Bearer {KEY_OPS}"}
        ops = raw.get("/inspect/api/trends", params=params, headers=as_ops).json()
        del params["owner"]
        every = raw.get("/inspect/api/trends", params=params, headers=as_ops).json()
    assert alice["scoped_to"] == "alice" and alice["owners"] == ["alice"]
    assert sum(alice["requests_per_min"]) == 1 * 60 / 3600  # hers alone, not bob's two
    # An admin key sees every key's, and may choose one.
    assert ops["scoped_to"] is None and ops["owners"] == ["alice", "bob"]
    assert sum(ops["requests_per_min"]) == 2 * 60 / 3600
    assert sum(every["requests_per_min"]) == 3 * 60 / 3600
