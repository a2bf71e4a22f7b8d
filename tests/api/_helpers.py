"""Helpers for the end-to-end API tests: raw SSE capture and parsing, error-body checks."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

MODEL = "tiny-llama"
KEEPALIVE = b": keep-alive\n"  # a comment line: it ends no event
TERMINAL = ("response.completed", "response.incomplete", "response.failed")

#: How long any single stream may take before a test calls it a hang.
STREAM_DEADLINE = 10.0


class StreamHang(AssertionError):
    """The server kept a stream open (keep-alives only) past the deadline."""


@dataclass(frozen=True)
class Frame:
    raw: bytes  # the frame's bytes including the blank line that ends it
    event: str
    data: dict[str, Any]
    id: int

    @property
    def seq(self) -> int:
        return int(self.data["sequence_number"])


def strip_keepalives(body: bytes) -> bytes:
    return body.replace(KEEPALIVE, b"")


def split_blocks(body: bytes) -> list[bytes]:
    """The SSE blocks of a body, each with its terminating blank line."""
    assert body == b"" or body.endswith(b"\n\n"), (
        f"stream does not end with a blank line: {body[-80:]!r}"
    )
    parts = body.split(b"\n\n")
    assert parts[-1] == b""
    return [p + b"\n\n" for p in parts[:-1]]


def parse_frames(body: bytes) -> list[Frame]:
    """Parse strictly: every non-comment block is `event:`, `data:`, `id:` in that order."""
    frames: list[Frame] = []
    for block in split_blocks(strip_keepalives(body)):
        assert not block.startswith(b":"), f"unexpected comment {block!r}"
        lines = block[:-2].split(b"\n")
        assert len(lines) == 3, f"frame is not exactly event/data/id: {block[:200]!r}"
        ev, data, id_ = lines
        assert ev.startswith(b"event: "), block[:200]
        assert data.startswith(b"data: "), block[:200]
        assert id_.startswith(b"id: "), block[:200]
        assert b"\r" not in block
        payload = json.loads(data[len(b"data: ") :].decode("utf-8"))
        frames.append(
            Frame(block, ev[len(b"event: ") :].decode(), payload, int(id_[len(b"id: ") :]))
        )
    return frames


def capture(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    deadline: float = STREAM_DEADLINE,
    on_chunk: Callable[[bytes], None] | None = None,
    **kwargs: Any,
) -> tuple[httpx.Response, bytes]:
    """Send a request and read its whole body as raw bytes, failing on a hang."""
    start = time.monotonic()
    chunks: list[bytes] = []
    with http.stream(method, url, **kwargs) as response:
        for chunk in response.iter_raw():
            chunks.append(chunk)
            if on_chunk is not None:
                on_chunk(chunk)
            if time.monotonic() - start > deadline:
                raise StreamHang(
                    f"{method} {url} still open after {deadline}s; "
                    f"last bytes: {b''.join(chunks)[-120:]!r}"
                )
    return response, b"".join(chunks)


def post_stream(http: httpx.Client, body: dict[str, Any], path: str = "/v1/responses"):
    """POST a streaming create; returns (response, raw bytes, frames)."""
    response, raw = capture(http, "POST", path, json={**body, "stream": True})
    assert response.status_code == 200, raw[:500]
    return response, raw, parse_frames(raw)


def assert_error(
    response: httpx.Response,
    status: int,
    *,
    param: str | None | type[Ellipsis] = ...,  # type: ignore[valid-type]
    code: str | None | type[Ellipsis] = ...,  # type: ignore[valid-type]
    type_: str = "invalid_request_error",
) -> dict[str, Any]:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}, JSON."""
    assert response.status_code == status, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == type_, error
    if param is not ...:
        assert error["param"] == param, error
    if code is not ...:
        assert error["code"] == code, error
    return error


def high_water(server: Any) -> int:
    """The log's AUTOINCREMENT mark: it moves with every row ever appended (and a purge,
    which only deletes, leaves it alone)."""
    with sqlite3.connect(server.state.store.path) as conn:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0])


def read_log(server: Any, stream_id: str) -> list[Any]:
    return list(server.call(server.state.store.read(stream_id)))


@contextmanager
def purged_rows(server: Any) -> Iterator[dict[str, list[Any]]]:
    """The rows of each stream the server purges meanwhile (an unstored response or
    completion, once read), as the log held them just before."""
    store = server.state.store
    purge = store.purge
    seen: dict[str, list[Any]] = {}

    async def reading_first(stream_ids: Any) -> int:
        rows = {sid: await store.read(sid) for sid in stream_ids}
        purged = int(await purge(stream_ids))
        seen.update(rows)  # only once the purge has committed: a waiter may read the log next
        return purged

    store.purge = reading_first
    try:
        yield seen
    finally:
        del store.purge  # the class's again


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@contextmanager
def one_at_a_time(server) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Decode one job at a time, so a second job really waits in the queue."""
    engine = server.state.engine
    before, engine.max_batch = engine.max_batch, 1
    try:
        yield
    finally:
        engine.max_batch = before


class Held:
    """The jobs `holding` keeps from the engine, and the way to hand them over."""

    def __init__(self, server: Any):
        self.server = server
        self.jobs: list[Any] = []

    def release(self) -> None:
        self.server.call(self._hand_over())

    async def _hand_over(self) -> None:  # on the server's loop, as the engine expects
        engine = self.server.state.engine
        vars(engine).pop("submit", None)
        for job in self.jobs:
            engine.submit(job)
        self.jobs.clear()


@contextmanager
def holding(server) -> Iterator[Held]:  # type: ignore[no-untyped-def]
    """Jobs submitted in the block wait, queued, until `release()` (or the block's end)
    hands them to the engine: a queue that lasts as long as the test wants, however fast
    the engine decodes whatever it would otherwise wait behind; and jobs that reach the
    engine together, however the threads that sent them were scheduled."""
    held = Held(server)
    engine = server.state.engine
    engine.submit = held.jobs.append  # the instance's, over the class's
    try:
        yield held
    finally:
        if "submit" in vars(engine):
            held.release()


# Long runs: greedy decoding of this prompt is deterministic and (checked) never meets EOS
# within LONG tokens, while sampling at temperature 1 meets it within a few hundred tokens
# about one time in three; so long runs are greedy, and every one is cancelled by its test.
# More than the tiny model's 2,048-token context holds: a LONG_RUN left going ends there,
# after ~2,025 tokens (~2.5 s on an idle machine).
LONG = 4000
GREEDY = {"input": "go on and on", "temperature": 0.0}
LONG_RUN = {**GREEDY, "max_output_tokens": LONG}
# A run that must outlast what its test does to it (a cancel, a hang-up, a kill), however
# long that takes: greedy, and its end token banned, so only the test (or max tokens) ends it.
EOS = 2  # <|im_end|> of the tiny tokenizer, its only end token
UNENDING = {"temperature": 0.0, "logit_bias": {str(EOS): -100}}
CANCEL_REQUESTED = "omni.response.cancel_requested"


def log_bytes(server: Any, rid: str) -> bytes:
    """The SSE bytes the log holds for a response (what any replay must send)."""
    return b"".join(
        f"event: {e.type}\ndata: {e.data}\nid: {e.seq}\n\n".encode() for e in read_log(server, rid)
    )


def n_deltas(server: Any, rid: str) -> int:
    return sum(e.type == "response.output_text.delta" for e in read_log(server, rid))


def is_finished(server: Any, rid: str) -> bool:
    rows = read_log(server, rid)
    return bool(rows) and rows[-1].type in TERMINAL
