"""Anthropic's Messages API, for what only HTTP shows (raw httpx on a real Hypercorn server
with API keys, the tiny real llama): SSE framing (event/data/id, `ping` keep-alives, no omni.*
event ever sent), Anthropic's error body and status on every path under /v1/messages while
chat completions keep OpenAI's, x-api-key, Anthropic's headers and Claude Code's extra fields
accepted, a stored message read back equal to the create's answer and its stream replayed
byte for byte. Behaviour: tests/service/test_messages.py; the SDKs: test_messages_sdk.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from tests.api._helpers import EOS, MODEL, assert_error, capture, holding, read_log, wait_for
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24
ORIGIN = "https://app.example.com"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
# Greedy with the end token banned: only max_tokens (or the test) ends it.
UNENDING = {"temperature": 0, "logit_bias": {str(EOS): -100}}


@pytest.fixture(scope="module")
def keyed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("messages") / "omni.db"
    keys = KeyRing([api_key(KEY_A, "alice"), api_key(KEY_B, "bob")])
    access = Access(keys=keys, allowed_origins=(ORIGIN,))
    srv = ServerThread(Settings(db_path=str(db), keepalive=1.0, access=access), tiny_engine)
    yield srv.start()
    srv.stop()


@pytest.fixture
def http(keyed: ServerThread) -> Iterator[httpx.Client]:
    """Alice's client, as Anthropic's SDKs send her key."""
    headers = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=keyed.base_url, timeout=30, headers=headers) as c:
        yield c


def ask(text: str = "hi", **more: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 4,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
        **more,
    }


def frames(raw: bytes) -> list[tuple[str, dict[str, Any], int]]:
    """Parse strictly: every frame is `event:`, `data:`, `id:` in that order, or a ping
    (`event:` and `data:`); (event, data, id), pings with id -1."""
    assert raw.endswith(b"\n\n"), raw[-80:]
    out = []
    for block in raw[:-2].split(b"\n\n"):
        lines = block.decode().split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        event, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == event, block
        if event == "ping":
            assert lines == ["event: ping", 'data: {"type": "ping"}'], block
            out.append((event, data, -1))
            continue
        assert len(lines) == 3 and lines[2].startswith("id: "), block
        out.append((event, data, int(lines[2][4:])))
    return out


def without_pings(raw: bytes) -> bytes:
    return raw.replace(PING, b"")


def assert_anthropic_error(response: httpx.Response, status: int, type_: str) -> str:
    """Anthropic's error body: {"type": "error", "error": {"type", "message"}}, JSON."""
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == type_, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return str(body["error"]["message"])


# --- SSE ---------------------------------------------------------------------------------


def test_a_stream_is_anthropics_sse(http: httpx.Client, keyed: ServerThread) -> None:
    response, raw = capture(http, "POST", "/v1/messages", json=ask(stream=True))
    assert response.status_code == 200, raw[:300]
    assert response.headers["content-type"].startswith("text/event-stream")
    seen = frames(raw)
    events = [e for e, _, _ in seen if e != "ping"]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert [i for _, _, i in seen if i >= 0] == list(range(len(events)))
    mid = seen[0][1]["message"]["id"]
    assert response.headers["x-omni-cache"] == "miss"
    # what was sent is what the log holds, exactly
    logged = b"".join(
        f"event: {e.type}\ndata: {e.data}\nid: {e.seq}\n\n".encode() for e in read_log(keyed, mid)
    )
    assert without_pings(raw) == logged


def test_a_waiting_stream_is_kept_alive_with_pings(http: httpx.Client, keyed: ServerThread) -> None:
    """The engine holds the job: the client reads message_start, then `ping` events (not
    SSE comments: Anthropic's SDKs read events), then the rest."""
    got = bytearray()
    with holding(keyed) as held:
        with http.stream("POST", "/v1/messages", json=ask("wait", stream=True)) as response:
            chunks = response.iter_raw()
            while got.count(PING) < 2:
                got += next(chunks)
            held.release()
            for chunk in chunks:
                got += chunk
    seen = [e for e, _, _ in frames(bytes(got))]
    assert seen[0] == "message_start" and seen[-1] == "message_stop"
    assert seen.count("ping") >= 2
    assert not any(e.startswith("omni.") for e in seen)


def test_a_client_that_leaves_cancels_and_no_omni_event_is_sent(
    http: httpx.Client, keyed: ServerThread
) -> None:
    """The client goes after its first text: the run is cancelled (the log ends with Omni's
    own event), and a replay of the message sends none of it."""
    body = ask("go on", stream=True, **{**UNENDING, "max_tokens": 2000})
    with http.stream("POST", "/v1/messages", json=body) as response:
        got = b""
        for chunk in response.iter_raw():
            got += chunk
            if b"text_delta" in got:
                break
    mid = frames(got[: got.index(b"\n\n") + 2])[0][1]["message"]["id"]
    assert wait_for(lambda: read_log(keyed, mid)[-1].type == "omni.message.cancelled", 30)
    response, raw = capture(http, "GET", f"/v1/messages/{mid}", params={"stream": "true"})
    assert response.status_code == 200
    seen = frames(raw)
    assert seen and not any(e.startswith("omni.") for e, _, _ in seen)
    assert "message_stop" not in [e for e, _, _ in seen]
    assert http.get(f"/v1/messages/{mid}").json()["stop_reason"] is None


# --- read back ----------------------------------------------------------------------------


def test_a_stored_message_is_read_back_as_answered(http: httpx.Client) -> None:
    created = http.post("/v1/messages", json=ask("read me back"))
    assert created.status_code == 200, created.text
    answer = created.json()
    assert answer["type"] == "message" and answer["id"].startswith("msg_")
    assert http.get(f"/v1/messages/{answer['id']}").json() == answer


def test_a_stream_is_replayed_byte_for_byte_after_any_event(http: httpx.Client) -> None:
    response, raw = capture(http, "POST", "/v1/messages", json=ask("replay me", stream=True))
    sent = without_pings(raw)
    seen = frames(sent)
    mid = seen[0][1]["message"]["id"]
    blocks = [b + b"\n\n" for b in sent[:-2].split(b"\n\n")]
    for after in (-1, 0, 2, len(blocks) - 2):
        _, again = capture(
            http,
            "GET",
            f"/v1/messages/{mid}",
            params={"stream": "true", "starting_after": str(after)},
        )
        assert without_pings(again) == b"".join(blocks[after + 1 :]), after
    # Last-Event-ID resumes as starting_after does
    _, resumed = capture(
        http, "GET", f"/v1/messages/{mid}?stream=true", headers={"last-event-id": "1"}
    )
    assert without_pings(resumed) == b"".join(blocks[2:])


def test_another_keys_message_is_not_found(http: httpx.Client) -> None:
    mid = http.post("/v1/messages", json=ask("mine")).json()["id"]
    for path in (f"/v1/messages/{mid}", f"/v1/messages/{mid}?stream=true"):
        bob = http.get(path, headers={"x-api-key": KEY_B})
        assert_anthropic_error(bob, 404, "not_found_error")


# --- what Claude Code sends ---------------------------------------------------------------


def test_claude_codes_headers_and_fields_are_accepted(http: httpx.Client) -> None:
    body = ask(
        "hi",
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        metadata={"user_id": "user_abc_account_1_session_2"},
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        service_tier="auto",
        speed="fast",
        output_config={"effort": "low"},
        stream=True,
    )
    body["messages"] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    headers = {
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        "anthropic-dangerous-direct-browser-access": "true",
        "x-app": "cli",
    }
    response, raw = capture(http, "POST", "/v1/messages", json=body, headers=headers)
    assert response.status_code == 200, raw[:300]
    assert frames(raw)[-1][0] == "message_stop"
    counted = http.post(
        "/v1/messages/count_tokens",
        json={k: v for k, v in body.items() if k not in ("max_tokens", "stream")},
        headers=headers,
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > 0


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "type_"),
    [
        ("POST", "/v1/messages", {**ask(), "max_tokens": None}, 400, "invalid_request_error"),
        ("POST", "/v1/messages", {**ask(), "model": "nope"}, 404, "not_found_error"),
        ("POST", "/v1/messages", ask(stream=True, model="nope"), 404, "not_found_error"),
        ("POST", "/v1/messages/count_tokens", {"model": MODEL}, 400, "invalid_request_error"),
        (
            "POST",
            "/v1/messages/count_tokens",
            {"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
            404,
            "not_found_error",
        ),
        ("GET", "/v1/messages/msg_unknown", None, 404, "not_found_error"),
        ("GET", "/v1/messages/msg_unknown?stream=true", None, 404, "not_found_error"),
        ("GET", "/v1/messages", None, 405, "invalid_request_error"),
        ("DELETE", "/v1/messages/msg_unknown", None, 405, "invalid_request_error"),
        ("GET", "/v1/messages/batches/x/results", None, 404, "not_found_error"),
        ("POST", "/v1/messages/batches", {}, 405, "invalid_request_error"),
    ],
    ids=[
        "bad-body",
        "unknown-model",
        "unknown-model-streamed",
        "count-bad-body",
        "count-unknown-model",
        "unknown-id",
        "unknown-id-streamed",
        "get-create",
        "delete",
        "unknown-route",
        "batches",
    ],
)
def test_every_error_under_messages_is_anthropics(
    http: httpx.Client,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    type_: str,
) -> None:
    assert_anthropic_error(http.request(method, path, json=body), status, type_)


def test_a_bad_field_is_named(http: httpx.Client) -> None:
    message = assert_anthropic_error(
        http.post("/v1/messages", json={k: v for k, v in ask().items() if k != "max_tokens"}),
        400,
        "invalid_request_error",
    )
    assert "max_tokens" in message
    bad_json = http.post("/v1/messages", content=b"{", headers={"content-type": "application/json"})
    assert_anthropic_error(bad_json, 400, "invalid_request_error")


@pytest.mark.parametrize(
    "headers",
    [{}, {"x-api-key": "sk-wrong"}, {"authorization": "Bearer sk-wrong"}],
    ids=["missing", "wrong-x-api-key", "wrong-bearer"],
)
@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages/msg_x"]
)
def test_a_missing_or_wrong_key_is_anthropics_401(
    keyed: ServerThread, headers: dict[str, str], path: str
) -> None:
    with httpx.Client(base_url=keyed.base_url, timeout=30, headers=headers) as c:
        method = "GET" if path.endswith("msg_x") else "POST"
        assert_anthropic_error(c.request(method, path, json=ask()), 401, "authentication_error")


def test_either_header_carries_the_key(keyed: ServerThread) -> None:
    for headers in ({"x-api-key": KEY_A}, {"authorization": f"Bearer {KEY_A}"}):
        with httpx.Client(base_url=keyed.base_url, timeout=30, headers=headers) as c:
            response = c.post("/v1/messages/count_tokens", json=ask())
            assert response.status_code == 200, (headers, response.text)


def test_a_browser_page_may_send_anthropics_headers(http: httpx.Client) -> None:
    """The preflight of Anthropic's JavaScript SDK in a browser: its key header and its own
    headers allowed for an allowed origin; the answer readable by that page."""
    sent = "x-api-key, anthropic-version, anthropic-dangerous-direct-browser-access, "
    preflight = http.options(
        "/v1/messages",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": sent + "content-type, x-stainless-os",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    allowed = {h.strip() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {h.strip() for h in sent.split(",") if h.strip()} <= allowed
    answer = http.post("/v1/messages/count_tokens", json=ask(), headers={"origin": ORIGIN})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ORIGIN


def test_chat_completions_keep_openais_errors(keyed: ServerThread) -> None:
    with httpx.Client(base_url=keyed.base_url, timeout=30, headers={"x-api-key": KEY_A}) as c:
        assert_error(c.post("/v1/chat/completions", json={"model": MODEL}), 400)
        assert_error(
            c.post(
                "/v1/chat/completions",
                json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
            ),
            404,
            code="model_not_found",
        )
    with httpx.Client(base_url=keyed.base_url, timeout=30) as anonymous:
        assert_error(anonymous.get("/v1/models"), 401, code="invalid_api_key")
