"""background: true: the create returns at once (queued), the generation runs with no
client attached and is recorded exactly as a streamed response would be (spec c.4b, d,
checklist 13-14); background + stream streams those same events live; the token ids go to
`<id>/tokens` alongside the deltas."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.api._helpers import (
    MODEL,
    TERMINAL,
    assert_error,
    capture,
    log_bytes,
    parse_frames,
    read_log,
    strip_keepalives,
    wait_for,
)


def poll_terminal(client: OpenAI, rid: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        r = client.responses.retrieve(rid)  # strict validation at every stage
        if not seen or seen[-1] != r.status:
            seen.append(r.status)
        if r.status not in ("queued", "in_progress"):
            return r, seen
        assert time.monotonic() < deadline, f"{rid} still {r.status} after {timeout}s"
        time.sleep(0.02)


def recorded_tokens(server: Any, rid: str) -> list[int]:
    return token_ids(read_log(server, f"{rid}/tokens"))


def token_ids(rows: Sequence[Any]) -> list[int]:
    """The token ids of a response's `<id>/tokens` stream, checked as they are recorded."""
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert {r.type for r in rows} <= {"omni.tokens"}
    tokens = [t for r in rows for t in json.loads(r.data)]
    assert all(isinstance(t, int) for t in tokens)
    return tokens


def check_background_order(types: list[str]) -> None:
    """created(queued), queued, in_progress, item.added, part.added, delta*, text.done,
    part.done, item.done, completed|incomplete."""
    assert types[:5] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ], types
    n = sum(1 for t in types if t == "response.output_text.delta")
    assert types[5 : 5 + n] == ["response.output_text.delta"] * n, types
    assert types[5 + n :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        types[-1],
    ], types
    assert types[-1] in ("response.completed", "response.incomplete"), types


def check_background_log(server: Any, rid: str, max_tokens: int) -> dict[str, Any]:
    """The log of a finished background response; returns its terminal response."""
    final = check_background_rows(read_log(server, rid), rid, max_tokens)
    # The token ids recorded beside the deltas are exactly the generated ones.
    assert len(recorded_tokens(server, rid)) == final["usage"]["output_tokens"]
    return final


def check_background_rows(rows: Sequence[Any], rid: str, max_tokens: int) -> dict[str, Any]:
    """A finished background response's rows, as the log holds them; returns its terminal
    response."""
    assert [r.seq for r in rows] == list(range(len(rows)))
    types = [r.type for r in rows]
    check_background_order(types)
    data = [json.loads(r.data) for r in rows]
    assert [d["type"] for d in data] == types
    assert [d["sequence_number"] for d in data] == list(range(len(rows)))
    assert data[0]["response"]["status"] == "queued"
    assert data[0]["response"]["background"] is True
    assert data[0]["response"]["output"] == []
    assert data[1]["response"]["status"] == "queued"
    assert data[2]["response"]["status"] == "in_progress"
    for d in (data[0], data[1], data[2], data[-1]):
        assert d["response"]["id"] == rid
    final = data[-1]["response"]
    text = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    assert data[-4]["text"] == text
    assert final["output"][0]["content"][0]["text"] == text
    assert final["status"] == types[-1].removeprefix("response.")
    assert final["background"] is True
    used = final["usage"]["output_tokens"]
    if final["status"] == "incomplete":
        assert used == max_tokens
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert used <= max_tokens
    return final


def test_background_requires_store(client: OpenAI, http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "x", "background": True, "store": False},
    )
    assert_error(res, 400, param="background")
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, input="x", background=True, store=False)
    assert exc.value.param == "background"
    # The same with stream: refused before any SSE byte.
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "x", "background": True, "store": False, "stream": True},
    )
    assert_error(res, 400, param="background")


def test_background_returns_queued_at_once_and_runs_alone(
    client: OpenAI, http: httpx.Client, server
) -> None:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    r = client.responses.create(
        model=MODEL, input="Work on this alone.", background=True, max_output_tokens=60
    )
    assert time.monotonic() - start < 1.0
    assert r.status == "queued"
    assert r.background is True
    assert r.output == [] and r.usage is None and r.completed_at is None

    final, seen = poll_terminal(client, r.id)
    assert seen[-1] in ("completed", "incomplete")
    assert set(seen) <= {"queued", "in_progress", "completed", "incomplete"}
    assert final.background is True

    logged = check_background_log(server, r.id, 60)
    assert final.model_dump(mode="json", exclude_unset=True) == logged
    assert http.get(f"/v1/responses/{r.id}").json() == logged

    # A full replay equals the log, byte for byte.
    res, raw = capture(http, "GET", f"/v1/responses/{r.id}", params={"stream": "true"})
    assert res.status_code == 200
    assert raw == log_bytes(server, r.id)
    frames = parse_frames(raw)
    check_background_order([f.event for f in frames])

    # The SDK reads the replay (strict), the stream helper too (it needs created first).
    events = list(client.responses.retrieve(r.id, stream=True))
    assert [e.type for e in events] == [f.event for f in frames]
    with client.responses.stream(response_id=r.id) as stream:
        assert [e.type for e in stream] == [f.event for f in frames]


# Every delta and token recorded with no client attached: tests/service/test_background.py.


def test_background_retrieve_while_running_is_valid(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    """A retrieve during the run shows the partial response (strictly valid)."""
    r = client.responses.create(
        model=MODEL,
        input="go on and on",
        temperature=0.0,  # greedy: this prompt never meets EOS early
        background=True,
        max_output_tokens=4000,
    )
    try:
        assert wait_for(
            lambda: (
                sum(e.type == "response.output_text.delta" for e in read_log(server, r.id)) >= 5
            ),
            timeout=5,
        )
        mid = client.responses.retrieve(r.id)
        if mid.status == "in_progress":  # (it could in theory have hit EOS already)
            assert mid.usage is None
            assert mid.output and mid.output[0].status == "in_progress"
            assert mid.output_text != ""
    finally:
        client.responses.cancel(r.id)


def test_background_stream_live_equals_replay(http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    res, raw = capture(
        http,
        "POST",
        "/v1/responses",
        json={
            "model": MODEL,
            "input": "stream in the background",
            "background": True,
            "stream": True,
            "max_output_tokens": 80,
        },
    )
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("text/event-stream")
    frames = parse_frames(raw)
    check_background_order([f.event for f in frames])
    assert [f.id for f in frames] == list(range(len(frames)))
    assert frames[0].data["response"]["status"] == "queued"
    assert frames[0].data["response"]["background"] is True
    rid = frames[0].data["response"]["id"]
    check_background_log(server, rid, 80)
    live = strip_keepalives(raw)
    assert live == log_bytes(server, rid)
    _, replay = capture(http, "GET", f"/v1/responses/{rid}", params={"stream": "true"})
    assert replay == live


def test_background_stream_with_sdk_helper(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    """responses.stream(background=True) accepts the stream: created comes first."""
    with client.responses.stream(
        model=MODEL, input="helper in the background", background=True, max_output_tokens=40
    ) as stream:
        events = list(stream)
        terminal = events[-1]
        if terminal.type == "response.completed":
            assert stream.get_final_response().id == terminal.response.id
    types = [e.type for e in events]
    check_background_order(types)
    assert events[0].response.status == "queued"
    assert events[1].response.status == "queued"
    assert events[2].response.status == "in_progress"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert terminal.type in TERMINAL
    rid = events[0].response.id
    logged = check_background_log(server, rid, 40)
    assert terminal.response.model_dump(mode="json", exclude_unset=True) == logged


# Each response's `<id>/tokens` against its usage: tests/service/test_background.py.


def test_foreground_records_no_tokens(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model=MODEL, input="fg", max_output_tokens=5)
    assert read_log(server, f"{r.id}/tokens") == []
