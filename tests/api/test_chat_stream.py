"""Streamed chat completions: chunk order and shapes as the SDK expects, raw SSE framing
(`data: <json>\\n\\n`, no `event:` lines, `data: [DONE]`), include_usage, and the bytes sent
equal the rows stored."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from openai import OpenAI

from omni.projections.completions import fold_chat
from tests.api._helpers import KEEPALIVE, MODEL, assert_error, capture, read_log

HI: Any = [{"role": "user", "content": "hi"}]
GREEDY_PROMPT: Any = [{"role": "user", "content": "go on and on"}]
DONE = b"data: [DONE]\n\n"


def sse_payloads(raw: bytes) -> list[str]:
    """The data payloads of a chat stream, strictly: every block is one `data: ` line, the
    last one `[DONE]`; keep-alive comments are allowed and skipped."""
    assert raw.endswith(DONE), raw[-200:]
    assert b"event:" not in raw
    assert b"\r" not in raw
    blocks = raw.replace(KEEPALIVE, b"").split(b"\n\n")
    assert blocks[-1] == b""
    payloads = []
    for block in blocks[:-1]:
        assert block.startswith(b"data: "), block[:200]
        assert b"\n" not in block, block[:200]  # one line per frame
        payloads.append(block[len(b"data: ") :].decode("utf-8"))
    assert payloads[-1] == "[DONE]"
    assert "[DONE]" not in payloads[:-1]
    return payloads[:-1]


def post_stream(http: httpx.Client, body: dict[str, Any], path: str = "/v1/chat/completions"):
    res, raw = capture(http, "POST", path, json={"model": MODEL, **body, "stream": True})
    assert res.status_code == 200, raw[:500]
    assert res.headers["content-type"].startswith("text/event-stream")
    return res, raw


def check_chunk_order(chunks: list[dict[str, Any]], include_usage: bool) -> None:
    cid = chunks[0]["id"]
    assert cid.startswith("chatcmpl-")
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert (c["id"], c["created"], c["model"]) == (cid, chunks[0]["created"], MODEL)
    body = chunks[:-1] if include_usage else chunks
    first, *content, last = body
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["finish_reason"] is None
    for c in content:
        assert set(c["choices"][0]["delta"]) == {"content"}
        assert c["choices"][0]["delta"]["content"] != ""
        assert c["choices"][0]["finish_reason"] is None
    assert last["choices"][0]["delta"] == {}
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    for c in body:
        assert len(c["choices"]) == 1 and c["choices"][0]["index"] == 0
        assert c["usage"] is None
    if include_usage:
        usage = chunks[-1]
        assert usage["choices"] == []
        assert set(usage["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}


def test_sdk_stream_with_include_usage(client: OpenAI, server) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    check_chunk_order([c.model_dump(exclude_unset=True) for c in chunks], include_usage=True)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    final = chunks[-2].choices[0]
    assert final.finish_reason in ("stop", "length")
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert all(c.usage is None for c in chunks[:-1])
    assert usage.prompt_tokens == len(server.state.engine.render(HI, []))
    assert usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens is not None
    assert (final.finish_reason == "length") == (usage.completion_tokens == 12)


def test_sdk_stream_without_include_usage_has_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, stream=True)
    )
    assert all(c.usage is None for c in chunks)
    assert all(len(c.choices) == 1 for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    check_chunk_order([c.model_dump(exclude_unset=True) for c in chunks], include_usage=False)


def test_include_usage_false_has_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HI,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": False},
        )
    )
    assert all(c.usage is None and len(c.choices) == 1 for c in chunks)


@pytest.mark.parametrize("include_usage", [True, False])
def test_raw_frames_equal_the_stored_rows(http: httpx.Client, server, include_usage: bool) -> None:
    body: dict[str, Any] = {"messages": HI, "max_tokens": 10, "store": True}  # kept to compare
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    res, raw = post_stream(http, body)
    assert res.headers["cache-control"] == "no-cache"
    payloads = sse_payloads(raw)
    chunks = [json.loads(p) for p in payloads]
    check_chunk_order(chunks, include_usage)
    rows = read_log(server, chunks[0]["id"])
    stored = [r.data for r in rows]
    assert rows[-1].type == "chat.completion.usage"
    # Exactly the stored bytes; the usage row goes out only to clients that asked for it.
    assert payloads == (stored if include_usage else stored[:-1])
    assert all(r.type == "chat.completion.chunk" for r in rows[:-1])


def test_unprefixed_streaming_path(http: httpx.Client) -> None:
    _, raw = post_stream(http, {"messages": HI, "max_tokens": 3}, path="/chat/completions")
    chunks = [json.loads(p) for p in sse_payloads(raw)]
    check_chunk_order(chunks, include_usage=False)


def test_stream_and_fold_agree(http: httpx.Client, server) -> None:
    _, raw = post_stream(
        http,
        {
            "messages": HI,
            "max_tokens": 10,
            "store": True,  # kept to compare
            "stream_options": {"include_usage": True},
        },
    )
    chunks = [json.loads(p) for p in sse_payloads(raw)]
    joined = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    rows = read_log(server, chunks[0]["id"])
    folded = fold_chat([(r.type, r.data) for r in rows])
    assert folded["choices"][0]["message"]["content"] == joined
    assert folded["usage"] == chunks[-1]["usage"]
    assert folded["choices"][0]["finish_reason"] == chunks[-2]["choices"][0]["finish_reason"]


def test_stream_logprobs(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HI,
            max_tokens=10,
            logprobs=True,
            top_logprobs=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    entries = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs is not None
        for e in (c.choices[0].logprobs.content or [])
    ]
    usage = chunks[-1].usage
    assert usage is not None
    assert len(entries) == usage.completion_tokens
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in entries)
    for c in chunks[1:-2]:  # content chunks carry the logprobs of their tokens
        assert c.choices[0].logprobs is not None


def test_stream_stop_text_is_not_emitted(client: OpenAI) -> None:
    full = (
        client.chat.completions.create(
            model=MODEL,
            messages=GREEDY_PROMPT,
            max_tokens=40,
            temperature=0,
        )
        .choices[0]
        .message.content
    )
    assert full is not None and len(full) >= 12
    stop = full[6:9]
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=GREEDY_PROMPT,
            max_tokens=40,
            temperature=0,
            stop=stop,
            stream=True,
        )
    )
    joined = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert joined == full[: full.find(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_helper_snapshot(client: OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL,
        messages=HI,
        max_tokens=8,
        stream_options={"include_usage": True},
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        snapshot = stream.current_completion_snapshot
    assert snapshot.choices[0].message.content == "".join(deltas)
    assert snapshot.usage is not None and snapshot.usage.completion_tokens <= 8
    assert snapshot.choices[0].finish_reason in ("stop", "length")


def test_invalid_stream_request_fails_before_any_sse(client: OpenAI, http: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=HI, n=3, stream=True)
    res = http.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": HI,
            "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "no schema"}},
        },
    )
    assert_error(res, 400)


def test_deterministic_stream_header(http: httpx.Client) -> None:
    body = {
        "messages": [{"role": "user", "content": "stream header"}],
        "max_tokens": 4,
        "temperature": 0,
        "store": True,  # only a stored answer is replayed
    }
    first, raw1 = post_stream(http, body)
    second, raw2 = post_stream(http, body)
    assert first.headers["x-omni-cache"] == "miss"
    assert second.headers["x-omni-cache"] == "hit"
    c1 = [json.loads(p) for p in sse_payloads(raw1)]
    c2 = [json.loads(p) for p in sse_payloads(raw2)]
    assert c1[0]["id"] != c2[0]["id"]
    assert [c["choices"] for c in c1] == [c["choices"] for c in c2]


def http_chunks(base_url: str, body: dict[str, Any]) -> list[bytes]:
    """The HTTP/1.1 chunks of one streamed response, as the server framed them (each body
    write is one chunk, however TCP delivered them)."""
    url = urlsplit(base_url)
    payload = json.dumps({"model": MODEL, **body, "stream": True}).encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
        )
        raw = b""
        while data := sock.recv(65536):
            raw += data
    head, rest = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head.lower(), head
    chunks = []
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(rest[:size])
        rest = rest[size + 2 :]


@pytest.mark.parametrize("include_usage", [False, True])
def test_done_leaves_in_the_write_of_the_last_events(server, include_usage: bool) -> None:
    """[DONE] goes out with the stream's last read, not in a write (and chunk) of its own."""
    body = {
        "messages": [{"role": "user", "content": f"one write {include_usage}"}],
        "max_tokens": 3,
        "stream_options": {"include_usage": include_usage},
    }
    chunks = http_chunks(server.base_url, body)
    assert chunks[-1].endswith(DONE) and chunks[-1] != DONE, chunks[-3:]
    last = sse_payloads(chunks[-1])[-1]
    assert ('"usage":{' in last) if include_usage else ('"finish_reason":"' in last), last
