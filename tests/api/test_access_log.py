"""One `omni.access` line per request, at info: method, path, status, ms, the object's id, its
tokens and, for chat completions, the replay cache's answer. A stream's line comes once it has
ended (tokens known), also when the client leaves early."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.api._helpers import MODEL, UNENDING, wait_for
from tests.server import ServerThread


def lines(caplog: pytest.LogCaptureFixture, path: str) -> list[dict[str, Any]]:
    return [
        r.access  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "omni.access" and r.access["path"] == path  # type: ignore[attr-defined]
    ]


@pytest.fixture
def access(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="omni.access")
    return caplog


def test_one_line_per_request_with_its_fields(
    server: ServerThread, client: Any, access: pytest.LogCaptureFixture
) -> None:
    made = client.responses.create(model=MODEL, input="hi", max_output_tokens=5)
    events = list(
        client.responses.create(model=MODEL, input="yo", max_output_tokens=4, stream=True)
    )
    streamed = events[-1].response
    chats = [
        client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "log"}],
            max_tokens=3,
            temperature=0,
            store=True,  # replayable
        ).parse()
        for _ in range(2)
    ]
    client.responses.retrieve(made.id)
    # A line is written once the answer has gone: the client may read it a moment before.
    paths = ("/v1/responses", "/v1/chat/completions", f"/v1/responses/{made.id}")
    assert wait_for(lambda: [len(lines(access, p)) for p in paths] == [2, 2, 1])

    created = lines(access, "/v1/responses")
    assert len(created) == 2
    for line, response in zip(created, (made, streamed), strict=True):
        assert (line["method"], line["status"], line["id"]) == ("POST", 200, response.id)
        assert line["input_tokens"] == response.usage.input_tokens
        assert line["output_tokens"] == response.usage.output_tokens
        assert isinstance(line["ms"], float) and line["ms"] >= 0
        assert line["request_id"].startswith("req_")

    chat = lines(access, "/v1/chat/completions")
    assert [line["cache"] for line in chat] == ["miss", "hit"]
    assert [line["id"] for line in chat] == [c.id for c in chats]
    assert [line["output_tokens"] for line in chat] == [c.usage.completion_tokens for c in chats]

    (retrieved,) = lines(access, f"/v1/responses/{made.id}")
    assert (retrieved["method"], retrieved["status"], retrieved["id"]) == ("GET", 200, made.id)

    text = [r.getMessage() for r in access.records if r.name == "omni.access"]
    assert any(m.startswith("POST /v1/responses 200 ") and f"id={made.id}" in m for m in text)


def test_errors_are_logged_with_their_status(
    server: ServerThread, access: pytest.LogCaptureFixture
) -> None:
    response = httpx.get(f"{server.base_url}/v1/responses/resp_missing", timeout=10)
    assert response.status_code == 404
    assert wait_for(lambda: len(lines(access, "/v1/responses/resp_missing")) == 1)
    (line,) = lines(access, "/v1/responses/resp_missing")
    assert (line["status"], line["id"]) == (404, "resp_missing")


def test_a_stream_left_early_is_logged_once(
    server: ServerThread, access: pytest.LogCaptureFixture
) -> None:
    body = {
        "model": MODEL,
        "input": "go on",
        "max_output_tokens": 100000,
        "stream": True,
        **UNENDING,  # still running when left
    }
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=30) as s:
        for line in s.iter_lines():
            if "output_text.delta" in line:
                break  # leave mid-stream: the server cancels the generation
    assert wait_for(lambda: len(lines(access, "/v1/responses")) == 1, timeout=30)
    (line,) = lines(access, "/v1/responses")
    assert line["status"] == 200 and line["id"].startswith("resp_")
    assert "output_tokens" not in line  # it never reached its terminal event with us
    # No second line arrives later (the cancelled generation ends without its client).
    rid = line["id"]
    assert wait_for(lambda: server.state.responses.runs.get(rid) is None, timeout=30)
    assert len(lines(access, "/v1/responses")) == 1


def test_probes_scrapes_and_the_inspector_are_logged_at_debug(
    server: ServerThread, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="omni.access")
    made = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    quiet = ["/health", "/metrics", "/inspect", "/inspect/static/list.js", "/inspect/api/recent",
             f"/inspect/api/{made.id}"]  # fmt: skip
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for path in quiet:
            assert http.get(path).status_code == 200, path
    assert wait_for(lambda: all(lines(caplog, p) for p in quiet))
    levels = {r.access["path"]: r.levelno for r in caplog.records if r.name == "omni.access"}  # type: ignore[attr-defined]
    assert {p: levels[p] for p in quiet} == dict.fromkeys(quiet, logging.DEBUG)
    assert levels["/v1/responses"] == logging.INFO
