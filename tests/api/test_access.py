"""Who may reach the API, through the real server and the OpenAI SDK: API keys (401s, /health
open), each key seeing only its own responses, streams and stored completions, caches that do
not cross keys, the key never in the log; CORS, JSON-only bodies, the Host check, the body
size limit."""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AuthenticationError, BadRequestError, NotFoundError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from tests.api._helpers import MODEL, assert_error
from tests.server import ServerThread

KEY_A = "sk-alice-" + "a" * 24
KEY_B = "sk-bob-" + "b" * 24
ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def keyed(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("keyed") / "omni.db"
    access = Access(
        keys=KeyRing([api_key(KEY_A, "alice"), api_key(KEY_B)]),
        allowed_origins=(ORIGIN,),
        allowed_hosts=("omni.example.com",),
        max_body_bytes=64 * 1024,
    )
    settings = Settings(db_path=str(db), keepalive=1.0, access=access)
    srv = ServerThread(settings, tiny_engine)
    yield srv.start()
    srv.stop()


def sdk(srv: ServerThread, key: str) -> OpenAI:
    return OpenAI(
        base_url=f"{srv.base_url}/v1", api_key=key, max_retries=0, _strict_response_validation=True
    )


@pytest.fixture(scope="module")
def alice(keyed: ServerThread) -> Iterator[OpenAI]:
    with sdk(keyed, KEY_A) as c:
        yield c


@pytest.fixture(scope="module")
def bob(keyed: ServerThread) -> Iterator[OpenAI]:
    with sdk(keyed, KEY_B) as c:
        yield c


@pytest.fixture
def raw(keyed: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=keyed.base_url, timeout=30) as c:
        yield c


def events_in(srv: ServerThread) -> int:
    with sqlite3.connect(srv.app.config["OMNI"].store.path) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


# --- keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/models", "/models", "/v1/responses/resp_x", "/v1/nope"])
def test_every_api_path_needs_a_key(raw: httpx.Client, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer sk-wrong"}, {"authorization": KEY_A}):
        res = raw.get(path, headers=headers)
        assert_error(res, 401, code="invalid_api_key")
        assert res.headers["www-authenticate"] == "Bearer"
    assert raw.get(path, headers={"authorization": f"bearer {KEY_B}"}).status_code != 401


def test_sdk_with_a_bogus_key_gets_authentication_error(keyed: ServerThread) -> None:
    with sdk(keyed, "sk-bogus") as bogus, pytest.raises(AuthenticationError) as exc:
        bogus.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    assert exc.value.code == "invalid_api_key"


def test_a_refused_request_writes_nothing(keyed: ServerThread, raw: httpx.Client) -> None:
    before = events_in(keyed)
    res = raw.post("/v1/responses", json={"model": MODEL, "input": "hi"})
    assert_error(res, 401)
    assert events_in(keyed) == before


def test_probes_and_scrapes_stay_open(raw: httpx.Client) -> None:
    assert raw.get("/health").json() == {"status": "ok"}
    assert raw.get("/v1/health").json() == {"status": "ok"}
    scrape = raw.get("/metrics")
    assert scrape.status_code == 200 and b"omni_http_requests_total" in scrape.content


def test_the_key_is_never_written_to_the_log(
    keyed: ServerThread, alice: OpenAI, bob: OpenAI
) -> None:
    alice.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    bob.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2, store=True
    )
    path = Path(keyed.app.config["OMNI"].store.path)
    data = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    assert KEY_A.encode() not in data and KEY_B.encode() not in data
    with sqlite3.connect(path) as conn:
        owners = {
            row[0]
            for row in conn.execute(
                "SELECT json_extract(data, '$.owner') FROM events "
                "WHERE type = 'omni.request.accepted'"
            )
        }
    assert "alice" in owners
    assert api_key(KEY_B).owner in owners and api_key(KEY_B).owner.startswith("key-")


# --- each key sees only its own ----------------------------------------------------


def test_responses_are_invisible_to_other_keys(alice: OpenAI, bob: OpenAI) -> None:
    mine = alice.responses.create(model=MODEL, input="hello", max_output_tokens=3)
    for call in (
        lambda: bob.responses.retrieve(mine.id),
        lambda: list(bob.responses.retrieve(mine.id, stream=True)),
        lambda: bob.responses.input_items.list(mine.id),
        lambda: bob.responses.delete(mine.id),
    ):
        with pytest.raises(NotFoundError):
            call()
    with pytest.raises(BadRequestError) as exc:
        bob.responses.create(model=MODEL, input="go on", previous_response_id=mine.id)
    assert exc.value.code == "previous_response_not_found"
    # Still whole for its owner, and nothing bob did touched it.
    assert alice.responses.retrieve(mine.id).output_text == mine.output_text
    replay = [e.type for e in alice.responses.retrieve(mine.id, stream=True)]
    assert replay[0] == "response.created" and replay[-1] == "response.incomplete"
    assert len(alice.responses.input_items.list(mine.id).data) == 1
    chained = alice.responses.create(
        model=MODEL, input="go on", previous_response_id=mine.id, max_output_tokens=2
    )
    assert chained.previous_response_id == mine.id


def test_background_cancel_is_owner_only(alice: OpenAI, bob: OpenAI) -> None:
    job = alice.responses.create(model=MODEL, input="count", background=True, max_output_tokens=200)
    with pytest.raises(NotFoundError):
        bob.responses.cancel(job.id)
    assert alice.responses.cancel(job.id).status in ("cancelled", "completed", "incomplete")


def test_stored_completions_are_invisible_to_other_keys(alice: OpenAI, bob: OpenAI) -> None:
    tag = uuid.uuid4().hex
    mine = alice.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        store=True,
        metadata={"tag": tag},
    )
    theirs = bob.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        store=True,
        metadata={"tag": tag},
    )
    listed = {c.id for c in alice.chat.completions.list(metadata={"tag": tag}, limit=100)}
    assert listed == {mine.id}
    assert {c.id for c in bob.chat.completions.list(metadata={"tag": tag})} == {theirs.id}
    for call in (
        lambda: bob.chat.completions.retrieve(mine.id),
        lambda: bob.chat.completions.messages.list(mine.id),
        lambda: bob.chat.completions.update(mine.id, metadata={"x": "y"}),
        lambda: bob.chat.completions.delete(mine.id),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert alice.chat.completions.retrieve(mine.id).metadata == {"tag": tag}


def test_the_replay_cache_does_not_cross_keys(alice: OpenAI, bob: OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"cache {uuid.uuid4().hex}"}],
        "temperature": 0,
        "max_tokens": 3,
        "store": True,  # replayable
    }

    def served(client: OpenAI) -> str:
        return str(client.chat.completions.with_raw_response.create(**body).headers["x-omni-cache"])

    assert [served(alice), served(alice), served(bob), served(bob)] == [
        "miss",
        "hit",
        "miss",
        "hit",
    ]


def test_the_prefix_cache_does_not_cross_keys(alice: OpenAI, bob: OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "A shared system prompt that is long enough to be worth caching, surely.",
        "temperature": 0,
        "max_output_tokens": 2,
        "prompt_cache_key": uuid.uuid4().hex,
    }

    def reused(client: OpenAI) -> int:
        usage = client.responses.create(**body).usage
        assert usage is not None
        return int(usage.input_tokens_details.cached_tokens)

    assert reused(alice) == 0
    assert reused(alice) > 0
    assert reused(bob) == 0  # the same prompt and prompt_cache_key, another key


# --- browsers -------------------------------------------------------------------------


def test_cors_preflight_from_an_allowed_origin(raw: httpx.Client) -> None:
    res = raw.options(
        "/v1/responses",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type, x-stainless-os",
        },
    )
    assert res.status_code == 204
    assert res.headers["access-control-allow-origin"] == ORIGIN
    allowed = {h.strip() for h in res.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "last-event-id", "x-stainless-os"} <= allowed
    assert "POST" in res.headers["access-control-allow-methods"]


def test_cors_answers_carry_the_exposed_headers(raw: httpx.Client) -> None:
    res = raw.get("/v1/models", headers={"origin": ORIGIN, "authorization": f"Bearer {KEY_A}"})
    assert res.status_code == 200
    assert res.headers["access-control-allow-origin"] == ORIGIN
    exposed = {h.strip() for h in res.headers["access-control-expose-headers"].split(",")}
    assert exposed == {"x-request-id", "x-omni-cache"}


def test_other_origins_are_refused(keyed: ServerThread, raw: httpx.Client) -> None:
    preflight = raw.options(
        "/v1/responses",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    before = events_in(keyed)
    res = raw.post(
        "/v1/responses",
        json={"model": MODEL, "input": "hi"},
        headers={"origin": "https://evil.example", "authorization": f"Bearer {KEY_A}"},
    )
    assert_error(res, 403, code="origin_not_allowed")
    assert events_in(keyed) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "multipart/form-data; boundary=x"},
        {},
    ],
)
def test_only_json_bodies(keyed: ServerThread, headers: dict[str, str]) -> None:
    before = events_in(keyed)
    body = b'{"model": "tiny-llama", "input": "hi", "max_output_tokens": 2}'
    with httpx.Client(base_url=keyed.base_url, timeout=30) as c:
        # httpx adds no content type for raw bytes: the {} case sends none.
        res = c.post(
            "/v1/responses",
            content=body,
            headers={**headers, "authorization": f"Bearer {KEY_A}"},
        )
        assert_error(res, 415, code="unsupported_media_type")
        assert events_in(keyed) == before
        ok = c.post(
            "/v1/responses",
            content=body,
            headers={
                "content-type": "application/json; charset=utf-8",
                "authorization": f"Bearer {KEY_A}",
            },
        )
    assert ok.status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:10240", "omni.example.org"])
def test_foreign_host_is_refused(keyed: ServerThread, raw: httpx.Client, host: str) -> None:
    """DNS rebinding: a name that resolves to this server but is not its own."""
    before = events_in(keyed)
    res = raw.post(
        "/v1/responses",
        json={"model": MODEL, "input": "hi"},
        headers={"host": host, "authorization": f"Bearer {KEY_A}"},
    )
    assert_error(res, 403, code="host_not_allowed")
    assert events_in(keyed) == before


@pytest.mark.parametrize(
    "host", ["localhost:1", "127.0.0.1", "[::1]:80", "10.1.2.3", "omni.example.com", "a.localhost"]
)
def test_own_names_addresses_and_allowed_hosts_are_answered(raw: httpx.Client, host: str) -> None:
    res = raw.get("/v1/models", headers={"host": host, "authorization": f"Bearer {KEY_A}"})
    assert res.status_code == 200


def test_a_body_over_the_limit_is_413(keyed: ServerThread, raw: httpx.Client) -> None:
    before = events_in(keyed)
    big = {"model": MODEL, "input": "x" * (65 * 1024)}
    res = raw.post("/v1/responses", json=big, headers={"authorization": f"Bearer {KEY_A}"})
    assert_error(res, 413, code="request_too_large")

    def chunks() -> Iterator[bytes]:  # no content-length: cut off while it is read
        yield b'{"model": "tiny-llama", "input": "'
        for _ in range(80):
            yield b"x" * 1024
        yield b'"}'

    res = raw.post(
        "/v1/responses",
        content=chunks(),
        headers={"authorization": f"Bearer {KEY_A}", "content-type": "application/json"},
    )
    assert res.status_code == 413
    assert res.json()["error"]["type"] == "invalid_request_error"
    assert events_in(keyed) == before


def test_an_http2_body_without_a_length_is_checked_too(keyed: ServerThread) -> None:
    """HTTP/2 needs neither content-length nor chunked: the body is there all the same."""

    def body() -> Iterator[bytes]:
        yield b'{"model": "tiny-llama", "input": "hi"}'

    before = events_in(keyed)
    with httpx.Client(base_url=keyed.base_url, http1=False, http2=True, timeout=30) as c:
        res = c.post(
            "/v1/responses",
            content=body(),
            headers={"content-type": "text/plain", "authorization": f"Bearer {KEY_A}"},
        )
    assert res.http_version == "HTTP/2"
    assert_error(res, 415, code="unsupported_media_type")
    assert events_in(keyed) == before


def test_an_http2_body_sent_after_the_refusal_keeps_the_connection(
    keyed: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    """The server refuses on headers alone but answers once the body is in: a DATA frame for a
    stream Hypercorn had already answered and closed would fail the whole connection."""

    def late_body() -> Iterator[bytes]:
        time.sleep(0.5)  # the refusal is ready by now; the body follows it
        yield b'{"model": "tiny-llama", "input": "hi"}'

    headers = {"content-type": "text/plain", "authorization": f"Bearer {KEY_A}"}
    caplog.set_level(logging.ERROR)
    with httpx.Client(base_url=keyed.base_url, http1=False, http2=True, timeout=30) as c:
        refused = c.post("/v1/responses", content=late_body(), headers=headers)
        models = c.get("/v1/models", headers={"authorization": f"Bearer {KEY_A}"})
        assert refused.http_version == models.http_version == "HTTP/2"
        assert_error(refused, 415, code="unsupported_media_type")
        assert models.status_code == 200
    failed = [r for r in caplog.records if r.exc_info or "Unhandled exception" in r.getMessage()]
    assert failed == []


def test_refusals_are_logged_and_counted_by_route_with_the_key(
    raw: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omni.access")
    assert raw.get("/v1/models").status_code == 401
    assert raw.get("/v1/models", headers={"authorization": f"Bearer {KEY_A}"}).status_code == 200
    scrape = raw.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    counted = {
        (s.labels["route"], s.labels["status"])
        for s in families["omni_http_requests"].samples
        if s.name == "omni_http_requests_total"
    }
    assert {("/v1/models", "401"), ("/v1/models", "200")} <= counted
    keys = [
        r.access.get("key")  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "omni.access" and r.access["path"] == "/v1/models"  # type: ignore[attr-defined]
    ]
    assert None in keys and "alice" in keys
    assert not any(KEY_A in r.getMessage() for r in caplog.records)


def test_a_refused_body_keeps_the_connection(keyed: ServerThread) -> None:
    """A request refused before its body arrived (here a 415 on headers alone): the server
    reads the body anyway, so the client's next request on the same connection is answered."""
    host, port = keyed.base_url.removeprefix("http://").split(":")
    body = b'{"model": "tiny-llama", "input": "hi", "max_output_tokens": 2}'
    head = (
        f"POST /v1/responses HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY_A}\r\n"
        f"content-type: text/plain\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    second = (
        f"GET /v1/models HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY_A}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        time.sleep(0.3)  # the server has refused it by now, with the body still to come
        sock.sendall(body + second)
        got = b""
        while got.count(b"HTTP/1.1 ") < 2 or not got.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)
    assert statuses == [b"415", b"200"]
