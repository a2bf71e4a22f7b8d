"""A client that goes away: a foreground response is cancelled at the next token (its log
ends with response.incomplete carrying status "cancelled" and the engine is free again at
once); a background + stream response goes on to its natural end (checklist 14)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import (
    CANCEL_REQUESTED,
    GREEDY,
    LONG,
    LONG_RUN,
    MODEL,
    TERMINAL,
    Frame,
    capture,
    is_finished,
    log_bytes,
    n_deltas,
    one_at_a_time,
    parse_frames,
    read_log,
    wait_for,
)


def terminal_response(server: Any, rid: str) -> dict[str, Any]:
    rows = read_log(server, rid)
    assert rows[-1].type in TERMINAL
    return dict(json.loads(rows[-1].data)["response"])


def recorded_tokens(server: Any, rid: str) -> list[int]:
    return [t for r in read_log(server, f"{rid}/tokens") for t in json.loads(r.data)]


def read_then_hang_up(base_url: str, body: dict[str, Any], deltas: int) -> list[Frame]:
    """POST a streaming create, read until `deltas` text deltas, then close the
    connection. Returns the frames read."""
    buf = b""
    with httpx.Client(base_url=base_url, timeout=10) as h:
        with h.stream("POST", "/v1/responses", json={**body, "stream": True}) as res:
            assert res.status_code == 200
            for chunk in res.iter_raw():
                buf += chunk
                frames = parse_frames(buf[: buf.rfind(b"\n\n") + 2])
                if sum(f.event == "response.output_text.delta" for f in frames) >= deltas:
                    break
                assert not frames or frames[-1].event not in TERMINAL, "ended before hang-up"
    return frames


def check_cancelled_log(server: Any, rid: str) -> dict[str, Any]:
    """A cancelled foreground log: items closed, then response.incomplete (cancelled)."""
    rows = read_log(server, rid)
    types = [r.type for r in rows]
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete", types[-5:]
    final = terminal_response(server, rid)
    assert final["status"] == "cancelled", final["status"]
    if "response.output_item.added" in types:
        assert types[-4:-1] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ]
        text = "".join(
            json.loads(r.data)["delta"] for r in rows if r.type == "response.output_text.delta"
        )
        assert final["output"][0]["content"][0]["text"] == text
        assert final["output"][0]["status"] == "incomplete"
    return final


@pytest.fixture
def cleanup(server):  # type: ignore[no-untyped-def]
    """Ids of long runs to stop whatever the test's outcome."""
    ids: list[str] = []
    yield ids

    async def stop(rid: str) -> None:
        server.state.responses.cancel_running(rid)

    for rid in ids:
        server.call(stop(rid))
    for rid in ids:
        wait_for(lambda rid=rid: is_finished(server, rid), timeout=60)


def test_foreground_stream_disconnect_cancels(server, cleanup) -> None:  # type: ignore[no-untyped-def]
    frames = read_then_hang_up(server.base_url, {"model": MODEL, **LONG_RUN}, deltas=5)
    hung_up = time.monotonic()
    rid = frames[0].data["response"]["id"]
    cleanup.append(rid)

    # The engine is free within about a token: a short request right after is quick.
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        res = h.post(
            "/v1/responses", json={"model": MODEL, "input": "next", "max_output_tokens": 2}
        )
    assert res.status_code == 200
    # A bound against a hang only, with room for a loaded machine: the run, left going, would
    # end within ~2.5 s (the tiny model's context); its output tokens below show the cancel.
    assert time.monotonic() - hung_up < 5.0, "the engine kept generating for the gone client"

    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    final = check_cancelled_log(server, rid)
    assert 5 <= final["usage"]["output_tokens"] < LONG // 4
    # The replay of what was recorded starts with exactly what the client had read.
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        _, raw = capture(h, "GET", f"/v1/responses/{rid}", params={"stream": "true"})
    assert raw == log_bytes(server, rid)
    assert raw.startswith(b"".join(f.raw for f in frames))


def test_foreground_sdk_stream_close_cancels(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    stream = client.responses.create(model=MODEL, stream=True, **LONG_RUN)  # type: ignore[arg-type]
    seen = []
    for event in stream:
        seen.append(event)
        if sum(e.type == "response.output_text.delta" for e in seen) >= 3:
            break
    stream.close()
    hung_up = time.monotonic()
    rid = seen[0].response.id
    cleanup.append(rid)
    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    assert time.monotonic() - hung_up < 5.0  # a hang's bound; the tokens show the cancel
    final = check_cancelled_log(server, rid)
    assert final["usage"]["output_tokens"] < LONG // 4
    got = client.responses.retrieve(rid)
    assert got.status == "cancelled"
    assert got.model_dump(mode="json", exclude_unset=True) == final


def test_foreground_stream_helper_exit_cancels(client: OpenAI, server, cleanup) -> None:  # type: ignore[no-untyped-def]
    with client.responses.stream(model=MODEL, **LONG_RUN) as stream:  # type: ignore[arg-type]
        for event in stream:
            if event.type == "response.created":
                rid = event.response.id
            if event.type == "response.output_text.delta":
                break
    cleanup.append(rid)
    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    final = check_cancelled_log(server, rid)
    assert final["usage"]["output_tokens"] < LONG // 4


def test_foreground_disconnect_while_waiting_for_the_engine(
    client: OpenAI, server, cleanup
) -> None:  # type: ignore[no-untyped-def]
    """The engine is busy; a foreground stream waiting for it is dropped: it ends
    cancelled at once (no output tokens) and the engine never runs it."""
    with one_at_a_time(server):
        generations = server.state.engine.generations
        busy = client.responses.create(model=MODEL, background=True, **LONG_RUN).id  # type: ignore[arg-type]
        cleanup.append(busy)
        assert wait_for(lambda: n_deltas(server, busy) >= 1, timeout=60)

        buf = b""
        with httpx.Client(base_url=server.base_url, timeout=10) as h:
            body = {"model": MODEL, "stream": True, **LONG_RUN}
            with h.stream("POST", "/v1/responses", json=body) as res:
                for chunk in res.iter_raw():
                    buf += chunk
                    if buf.count(b"\n\n") >= 2:  # created, in_progress
                        break
        rid = parse_frames(buf[: buf.rfind(b"\n\n") + 2])[0].data["response"]["id"]
        cleanup.append(rid)
        # Not ended while queued, it would wait for `busy` to end (and then run, so end
        # neither at once nor cancelled): the checks below fail either way.
        assert wait_for(lambda: is_finished(server, rid), timeout=60.0), "not ended while queued"
        assert not is_finished(server, busy)
        final = check_cancelled_log(server, rid)
        assert final["usage"]["output_tokens"] == 0

        client.responses.cancel(busy)
        client.responses.create(model=MODEL, input="after", max_output_tokens=2)
        assert server.state.engine.generations == generations + 2  # busy + after only


def test_foreground_non_stream_client_gone_cancels(server, cleanup) -> None:  # type: ignore[no-untyped-def]
    """A plain (non-stream) create whose client gives up is cancelled too."""
    before = {r.stream_id for r in server.call(server.state.store.by_type("response.created"))}
    with httpx.Client(base_url=server.base_url, timeout=0.5) as h:
        with pytest.raises(httpx.ReadTimeout):
            h.post("/v1/responses", json={"model": MODEL, **LONG_RUN})
    gave_up = time.monotonic()
    created = server.call(server.state.store.by_type("response.created"))
    (rid,) = [r.stream_id for r in created if r.stream_id not in before]
    cleanup.append(rid)
    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    assert time.monotonic() - gave_up < 5.0  # a hang's bound; the tokens show the cancel
    final = check_cancelled_log(server, rid)
    assert final["usage"]["output_tokens"] < LONG // 4


@pytest.mark.parametrize("max_tokens", [600])
def test_background_stream_disconnect_goes_on(client: OpenAI, server, max_tokens: int) -> None:  # type: ignore[no-untyped-def]
    body = {"model": MODEL, "background": True, **GREEDY, "max_output_tokens": max_tokens}
    frames = read_then_hang_up(server.base_url, body, deltas=3)
    rid = frames[0].data["response"]["id"]
    assert frames[0].data["response"]["status"] == "queued"
    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    final = terminal_response(server, rid)
    assert final["status"] == "incomplete"  # greedy: no EOS, so it ran to the limit
    assert final["usage"]["output_tokens"] == max_tokens
    assert len(recorded_tokens(server, rid)) == max_tokens
    assert CANCEL_REQUESTED not in [e.type for e in read_log(server, f"{rid}/request")]
    rows = read_log(server, rid)
    assert [r.type for r in rows][:3] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    text = "".join(
        json.loads(r.data)["delta"] for r in rows if r.type == "response.output_text.delta"
    )
    assert final["output"][0]["content"][0]["text"] == text
    assert client.responses.retrieve(rid).status == "incomplete"


def test_background_stream_helper_exit_goes_on(client: OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    with client.responses.stream(
        model=MODEL,
        background=True,
        max_output_tokens=300,
        **GREEDY,  # type: ignore[arg-type]
    ) as stream:
        for event in stream:
            if event.type == "response.created":
                rid = event.response.id
            if event.type == "response.output_text.delta":
                break
    assert wait_for(lambda: is_finished(server, rid), timeout=60)
    final = terminal_response(server, rid)
    assert final["status"] == "incomplete"
    assert final["usage"]["output_tokens"] == 300


def test_a_follower_hanging_up_does_not_cancel(server) -> None:  # type: ignore[no-untyped-def]
    """Only the creating client's stream cancels a foreground response: a GET follower of
    the same running response that goes away leaves it alone."""
    import threading

    body = {"model": MODEL, **GREEDY, "max_output_tokens": 500, "stream": True}
    got: dict[str, bytes] = {}

    def creator() -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as h:
            got["raw"] = capture(h, "POST", "/v1/responses", json=body)[1]

    # Counted before the creator starts: its response.created may commit at once.
    created = server.call(server.state.store.by_type("response.created"))
    t = threading.Thread(target=creator, daemon=True)
    t.start()
    assert wait_for(
        lambda: len(server.call(server.state.store.by_type("response.created"))) > len(created)
    )
    rid = server.call(server.state.store.by_type("response.created"))[-1].stream_id
    assert wait_for(lambda: n_deltas(server, rid) >= 1)
    with httpx.Client(base_url=server.base_url, timeout=10) as h:
        with h.stream("GET", f"/v1/responses/{rid}", params={"stream": "true"}) as res:
            for _ in res.iter_raw():
                break  # hang up after the first bytes
    t.join(timeout=10)
    assert not t.is_alive()
    final = terminal_response(server, rid)
    assert final["status"] == "incomplete"
    assert final["usage"]["output_tokens"] == 500
    assert parse_frames(got["raw"])[-1].data["response"] == final


@pytest.mark.parametrize("background", [False, True], ids=["disconnect", "background"])
def test_cancel_racing_the_engine_start_keeps_usage_consistent(
    server, cleanup, background: bool
) -> None:  # type: ignore[no-untyped-def]
    """The run is stopped just after the engine took the job, while the engine's first
    outputs (Started, some deltas) are handed to the loop but not yet recorded (the loop
    was busy). Whatever ends up recorded must agree with the usage: usage.output_tokens
    counts the tokens of the recorded deltas (a background run's `<id>/tokens` holds
    exactly usage.output_tokens ids).

    Foreground: service.cancel_running, what a gone client's stream calls (synchronously,
    in its finally). Background: service.runs.cancel, the step the cancel endpoint takes
    after recording the cancel request."""
    import asyncio

    from omni.schemas.responses import ResponseCreate

    service = server.state.responses

    async def scenario() -> str:
        body = ResponseCreate(model=MODEL, background=background, stream=True, **LONG_RUN)
        rid = (await service.create(body))["id"]
        time.sleep(0.1)  # hold the loop: the engine takes the job and emits Started + deltas
        await asyncio.sleep(0)  # those hand-overs run now; the recorder has not looked yet
        if background:
            service.runs.cancel(rid)
        else:
            service.cancel_running(rid)
        return str(rid)

    rid = server.call(scenario())
    cleanup.append(rid)
    assert wait_for(lambda: is_finished(server, rid), timeout=2)
    final = terminal_response(server, rid)
    assert final["status"] == "cancelled"
    recorded_deltas = n_deltas(server, rid)
    if background:
        assert len(recorded_tokens(server, rid)) == final["usage"]["output_tokens"], (
            f"{len(recorded_tokens(server, rid))} token ids and {recorded_deltas} deltas "
            f"recorded, but usage.output_tokens is {final['usage']['output_tokens']}"
        )
    # Every recorded delta came from at least one generated token.
    assert final["usage"]["output_tokens"] >= recorded_deltas, (
        f"{recorded_deltas} deltas recorded, usage.output_tokens {final['usage']['output_tokens']}"
    )
