"""Responses over a WebSocket (`GET /v1/responses`, `Upgrade: websocket`), with the
`websockets` client: turns on one connection carry exactly the events the log stores (what an
SSE stream sends), keys are checked at the upgrade, bad messages are answered and the socket
goes on, a dropped foreground turn is cancelled, a background one resumed by id and seq."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from socket import create_connection
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing
from tests.api._helpers import (
    LONG,
    MODEL,
    TERMINAL,
    UNENDING,
    is_finished,
    parse_frames,
    post_stream,
    read_log,
    wait_for,
)
from tests.server import ServerThread

TIMEOUT = 10.0  # seconds for any one message: a bound against a hang
KEY = "sk-socket"
# Greedy and short: the same body always makes the same text (cut at its limit: a random
# model rarely ends of itself, so a turn ends response.incomplete, as a finished one).
TURN = {"model": MODEL, "temperature": 0.0, "max_output_tokens": 6}
ENDED = ("response.completed", "response.incomplete")


def ws_url(server: ServerThread, path: str = "/v1/responses") -> str:
    return server.base_url.replace("http://", "ws://") + path


@pytest.fixture
def ws(server: ServerThread) -> Iterator[Connection]:
    with connect(ws_url(server), open_timeout=TIMEOUT, close_timeout=TIMEOUT) as opened:
        yield opened


def receive(socket: Connection) -> dict[str, Any]:
    message = socket.recv(timeout=TIMEOUT)
    assert isinstance(message, str), message  # JSON text, never binary
    data: dict[str, Any] = json.loads(message)
    return data


def read_turn(socket: Connection) -> list[dict[str, Any]]:
    """The messages of one turn, up to its terminal event (or an error)."""
    events = [receive(socket)]
    while events[-1]["type"] not in (*TERMINAL, "error"):
        events.append(receive(socket))
    return events


def turn(socket: Connection, **body: Any) -> list[dict[str, Any]]:
    socket.send(json.dumps({"type": "response.create", **body}))
    return read_turn(socket)


def stored(server: ServerThread, rid: str) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in read_log(server, rid)]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_three_turns_on_one_socket_are_the_stored_events(
    server: ServerThread, ws: Connection
) -> None:
    first = turn(ws, input="hello there", **TURN)
    rid = first[0]["response"]["id"]
    assert [e["type"] for e in first[:2]] == ["response.created", "response.in_progress"]
    assert first[-1]["type"] in ENDED
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    # Exactly what the log holds, and so what an SSE stream (live or replayed) sends.
    assert first == stored(server, rid)
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as http:
        replay = http.get(f"/v1/responses/{rid}", params={"stream": "true"})
        assert [f.data for f in parse_frames(replay.content)] == first
        # A streamed POST of the same body makes the same events (ids and times aside).
        _, _, frames = post_stream(http, {"input": "hello there", **TURN})
    assert [f.event for f in frames] == [e["type"] for e in first]
    assert text_of([f.data for f in frames]) == text_of(first)

    # Two more turns on the same socket, each chained to the one before.
    previous, used = first[-1]["response"], first[-1]["response"]["usage"]
    for words in ("and then?", "go on"):
        events = turn(ws, input=words, previous_response_id=previous["id"], **TURN)
        final = events[-1]["response"]
        assert events[-1]["type"] in ENDED
        assert final["previous_response_id"] == previous["id"]
        assert events == stored(server, final["id"])
        # The history came along: more input than the whole turn before it.
        assert final["usage"]["input_tokens"] > used["input_tokens"] + used["output_tokens"]
        previous, used = final, final["usage"]


def test_each_message_has_its_access_line(ws: Connection, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="omni.access")
    final = turn(ws, input="hi", **TURN)[-1]["response"]
    ws.send(json.dumps({"type": "response.processed", "response_id": final["id"]}))
    ws.send(json.dumps({"type": "response.nope"}))
    assert receive(ws)["type"] == "error"

    def lines() -> list[dict[str, Any]]:
        return [r.access for r in caplog.records if r.name == "omni.access"]  # type: ignore[attr-defined]

    assert wait_for(lambda: len(lines()) == 2)  # written as the answer's last message goes
    made, refused = lines()
    assert (made["method"], made["path"], made["status"]) == ("WS", "/v1/responses", 200)
    assert made["id"] == final["id"]
    assert made["input_tokens"] == final["usage"]["input_tokens"]
    assert made["output_tokens"] == final["usage"]["output_tokens"]
    assert (refused["method"], refused["status"]) == ("WS", 400) and "id" not in refused
    text = [r.getMessage() for r in caplog.records if r.name == "omni.access"]
    assert text[0].startswith("WS /v1/responses 200 ") and f"id={final['id']}" in text[0]


def test_a_warm_up_and_unstored_turns_chain_on_the_connection(
    server: ServerThread, ws: Connection
) -> None:
    """`generate: false` (Codex's warm-up) completes at once with no output and records
    nothing; turns with `store: false` chain to the connection's last response by its id, as
    OpenAI keeps it in the connection's memory: the model reads the whole chain."""
    warm = turn(ws, input="hello there", generate=False, store=False, **TURN)
    assert [e["type"] for e in warm] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in warm] == [0, 1, 2]
    final = warm[-1]["response"]
    assert final["status"] == "completed" and final["output"] == []
    assert final["usage"]["output_tokens"] == 0 and final["model"] == MODEL
    assert read_log(server, final["id"]) == []

    sent = [{"role": "user", "content": "hello there"}]
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as http:
        for words in ("and then?", "go on"):
            events = turn(ws, input=words, previous_response_id=final["id"], store=False, **TURN)
            assert events[-1]["type"] in ENDED, events[-1]
            sent.append({"role": "user", "content": words})
            # As many input tokens as the whole chain sent at once.
            counted = http.post(
                "/v1/responses/input_tokens", json={"model": MODEL, "input": sent}
            ).json()["input_tokens"]
            final = events[-1]["response"]
            assert final["usage"]["input_tokens"] == counted
            sent.extend(final["output"])

    # A response the connection does not hold, nor the log: OpenAI's error, and a full
    # request then goes through on the same socket.
    [error] = turn(ws, input="x", previous_response_id="resp_gone", store=False, **TURN)
    assert (error["code"], error["status"]) == ("previous_response_not_found", 400)
    assert turn(ws, input=sent, store=False, **TURN)[-1]["type"] in ENDED


def test_keys_are_checked_at_the_upgrade(tiny_engine: Any, tmp_path: Path) -> None:
    access = Access(keys=KeyRing.from_secrets(KEY))
    settings = Settings(db_path=str(tmp_path / "omni.db"), keepalive=1.0, access=access)
    srv = ServerThread(settings, tiny_engine).start()
    try:
        refusals = [
            ({}, 401),
            ({"authorization": "Bearer wrong"}, 401),
            ({"authorization": f"Bearer {KEY}", "origin": "https://evil.example"}, 403),
            ({"authorization": f"Bearer {KEY}", "host": "evil.example"}, 403),
        ]
        for headers, status in refusals:
            host = headers.pop("host", "127.0.0.1")  # a name rebound to this server's address
            url = f"ws://{host}:{srv.port}/v1/responses"
            with pytest.raises(InvalidStatus) as refused:
                with create_connection(("127.0.0.1", srv.port)) as sock:
                    connect(url, sock=sock, additional_headers=headers, open_timeout=TIMEOUT)
            response = refused.value.response
            assert response.status_code == status, headers
            error = json.loads(response.body or b"{}")["error"]
            assert error["type"] == "invalid_request_error" and error["message"], error
        for headers in ({"authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
            with connect(ws_url(srv, "/responses"), additional_headers=headers) as opened:
                events = turn(opened, input="hi", **TURN)
            assert events[-1]["type"] in ENDED
    finally:
        srv.stop()


def test_bad_messages_are_answered_and_the_socket_goes_on(ws: Connection) -> None:
    bad: list[tuple[str, str | None, int, str]] = [
        ("not json", None, 400, "not valid JSON"),
        ("[1, 2]", None, 400, "JSON object"),
        (json.dumps({"type": "response.nope"}), "type", 400, "response.nope"),
        (json.dumps({"input": "no type"}), "type", 400, "None"),
        (json.dumps({"type": "response.create", **TURN, "input": "x", "temperature": "hot"}),
         "temperature", 400, "temperature"),
        (json.dumps({"type": "response.create", "model": "no-such-model", "input": "x"}),
         "model", 404, "no-such-model"),
        (json.dumps({"type": "response.create", "model": MODEL}), "input", 400, "input"),
    ]  # fmt: skip
    for message, param, status, named in bad:
        ws.send(message)
        error = receive(ws)
        assert error["type"] == "error", (message, error)
        assert error["param"] == param and error["status"] == status, (message, error)
        assert named in error["message"], (message, error)
        assert error["error"]["message"] == error["message"]
        assert error["error"]["code"] == error["code"]
    # Codex's acknowledgement of a turn is taken, and answered by nothing: the next message
    # the socket carries is the next turn's first event.
    ws.send(json.dumps({"type": "response.processed", "response_id": "resp_x"}))
    events = turn(ws, input="still here?", **TURN)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ENDED


def test_a_dropped_background_turn_is_resumed_by_id_and_seq(server: ServerThread) -> None:
    body = {"model": MODEL, "input": "go on and on", **UNENDING, "max_output_tokens": 300}
    with connect(ws_url(server)) as socket:
        socket.send(json.dumps({"type": "response.create", "background": True, **body}))
        seen = [receive(socket)]
        while sum(e["type"] == "response.output_text.delta" for e in seen) < 3:
            seen.append(receive(socket))
    rid, last = seen[0]["response"]["id"], seen[-1]["sequence_number"]

    with connect(ws_url(server)) as socket:
        socket.send(
            json.dumps({"type": "response.resume", "response_id": rid, "starting_after": last})
        )
        rest = read_turn(socket)
        # The rest of the turn, from the event after the last one seen, to its end.
        assert rest[0]["sequence_number"] == last + 1
        assert seen + rest == stored(server, rid)
        final = rest[-1]["response"]
        assert final["status"] == "incomplete"  # its limit: background runs on without us
        assert final["usage"]["output_tokens"] == 300

        # From the start, and refusals that leave the socket open.
        socket.send(json.dumps({"type": "response.resume", "response_id": rid}))
        assert read_turn(socket) == stored(server, rid)
        for message, param, status in [
            ({"response_id": "resp_missing"}, None, 404),
            ({}, "response_id", 400),
            ({"response_id": rid, "starting_after": "x"}, "starting_after", 400),
        ]:
            socket.send(json.dumps({"type": "response.resume", **message}))
            error = receive(socket)
            assert (error["type"], error["param"], error["status"]) == ("error", param, status)


def test_a_reader_that_lags_does_not_hold_the_generation_back(server: ServerThread) -> None:
    """The socket follows the log: a client that reads nothing while its turn runs finds the
    turn ended in the log all the same, and then reads every event of it, in order."""
    body = {"model": MODEL, "input": "go on and on", **UNENDING, "max_output_tokens": 1000}
    # No compression and a one-message queue: what the client does not read stays unread.
    with connect(ws_url(server), compression=None, max_queue=1) as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        first = receive(socket)
        rid = first["response"]["id"]
        assert wait_for(lambda: is_finished(server, rid), timeout=60)
        events = [first, *read_turn(socket)]
    assert events == stored(server, rid)
    assert events[-1]["response"]["usage"]["output_tokens"] == 1000


def test_a_dropped_foreground_turn_is_cancelled(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omni.access")
    body = {"model": MODEL, "input": "go on and on", **UNENDING, "max_output_tokens": LONG}
    with connect(ws_url(server)) as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        seen = [receive(socket)]
        while sum(e["type"] == "response.output_text.delta" for e in seen) < 3:
            seen.append(receive(socket))
    rid = seen[0]["response"]["id"]
    try:
        assert wait_for(lambda: is_finished(server, rid), timeout=60)
    finally:
        server.call(_cancel(server, rid))
    events = stored(server, rid)
    assert events[: len(seen)] == seen
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "cancelled"
    assert final["response"]["usage"]["output_tokens"] < LONG // 4

    # Its access line says the client went first (499), as an HTTP stream's does.
    def gone() -> list[tuple[int, str]]:
        lines = [r.access for r in caplog.records if r.name == "omni.access"]  # type: ignore[attr-defined]
        return [(line["status"], line["id"]) for line in lines]

    assert wait_for(lambda: gone() == [(499, rid)]), gone()


async def _cancel(server: ServerThread, rid: str) -> None:
    server.state.responses.cancel_running(rid)  # a no-op once it has ended


def test_a_stop_closes_an_idle_socket_as_going_away(tiny_engine: Any, tmp_path: Path) -> None:
    """Once a graceful stop's endings are committed, an idle socket is closed with 1001
    rather than held until Hypercorn gives up on it."""
    settings = Settings(db_path=str(tmp_path / "omni.db"), keepalive=1.0)
    srv = ServerThread(settings, tiny_engine).start()
    try:
        with connect(ws_url(srv)) as socket:
            assert turn(socket, input="hi", **TURN)[-1]["type"] in ENDED
            srv.call(_stop(srv))
            with pytest.raises(ConnectionClosedOK) as closed:
                socket.recv(timeout=TIMEOUT)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    finally:
        srv.stop()


async def _stop(server: ServerThread) -> None:
    await server.state.lifecycle.stop()  # as `omni serve` does on SIGTERM, before Hypercorn
