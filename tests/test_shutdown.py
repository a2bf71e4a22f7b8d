"""A graceful stop: `omni serve` sent SIGTERM mid-generation keeps at least what a crash
(tests/test_crash.py) keeps. Running requests get --shutdown-grace seconds to finish; then
foreground ones end with a recorded `incomplete` their clients receive, and background ones
are left unfinished, so the next start continues them token-exactly."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from tests.api._helpers import TERMINAL, UNENDING, parse_frames
from tests.test_cli import serving
from tests.test_crash import BODY, greedy_text, replay, seq_of

SHUT_DOWN = "The server shut down before this response finished."
OF_TYPE = "SELECT count(*) FROM events WHERE type = ?"


def count(db: Path, sql: str, *args: Any) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def until(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def rows(db: Path, stream_id: str) -> list[tuple[int, str, str]]:
    with sqlite3.connect(db) as conn:
        query = "SELECT seq, type, data FROM events WHERE stream_id = ? ORDER BY seq"
        return list(conn.execute(query, (stream_id,)))


def sdk(base: str) -> OpenAI:
    return OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def test_sigterm_ends_foreground_work_and_keeps_background_work(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    db = tmp_path / "omni.db"
    # ~4 s alone: running still when the intake and the 1 s grace are over, however slowly
    # a loaded machine takes the three requests in (as long as the tiny model's 2,048-token
    # context allows: its prompt is some 34 tokens).
    max_tokens = 2000
    endless = {"input": "go on and on", "temperature": 0, "max_output_tokens": 100000}
    events: list[Any] = []
    plain: list[httpx.Response] = []
    with serving(tiny_model_dir, db, "warning", None, "--shutdown-grace", "1") as (base, proc):
        body = {**BODY, "temperature": 0, "max_output_tokens": max_tokens}
        background = httpx.post(f"{base}/v1/responses", json=body).json()["id"]

        def stream() -> None:
            with sdk(base) as client:
                for event in client.responses.create(model="tiny-llama", stream=True, **endless):
                    events.append(event)

        def post() -> None:
            plain.append(httpx.post(f"{base}/v1/responses", json=endless, timeout=60))

        threads = [threading.Thread(target=stream), threading.Thread(target=post)]
        for thread in threads:
            thread.start()
        until(lambda: count(db, OF_TYPE, "response.created") == 3)  # all three running
        until(lambda: count(db, OF_TYPE, "response.output_text.delta") >= 100)
        os.kill(proc.pid, signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=60)
        assert proc.wait(timeout=60) == 0

    # The stream received its ending, after every event before it.
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete" and final.error.message == SHUT_DOWN
    assert final.output[0].content[0].text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )
    # The non-streamed request got the response as it ended: JSON, with what it said.
    assert plain[0].status_code == 200, plain[0].text
    answer = plain[0].json()
    assert answer["status"] == "incomplete" and answer["error"]["message"] == SHUT_DOWN
    assert answer["output"][0]["content"][0]["text"]
    # The background response was left as a crash leaves it: no ending, no cancel.
    before = rows(db, background)
    assert before[-1][1] == "response.output_text.delta", before[-1][:2]
    tokens = [t for _, _, data in rows(db, f"{background}/tokens") for t in json.loads(data)]
    assert 0 < len(tokens) < max_tokens

    with serving(tiny_model_dir, db) as (base, _):
        events_after = replay(base, background)  # to its end, continued live
        result = httpx.get(f"{base}/v1/responses/{background}").json()
        reference = greedy_text(base, max_tokens)
    after = rows(db, background)
    assert after[: len(before)] == before  # continued: the same stream, nothing rewritten
    assert [seq_of(f) for f in events_after] == list(range(len(after)))
    assert events_after[-1].startswith(b"event: response.incomplete")
    assert result["status"] == "incomplete", result  # at max_output_tokens, not at the stop
    assert result["incomplete_details"] == {"reason": "max_output_tokens"}
    assert result["usage"]["output_tokens"] == max_tokens
    # Greedy decoding carried on token-exactly: the text equals an uninterrupted generation.
    assert result["output"][0]["content"][0]["text"] == reference
    resumed = [t for _, _, data in rows(db, f"{background}/tokens") for t in json.loads(data)]
    assert resumed[: len(tokens)] == tokens


def test_a_request_that_ends_within_the_grace_ends_as_usual(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    db = tmp_path / "omni.db"
    # Longer than Hypercorn's own 3 s wait for connections: the grace is what keeps it.
    body = {"input": "go on and on", "temperature": 0, "max_output_tokens": 1800}
    events: list[Any] = []
    with serving(tiny_model_dir, db, "warning", None, "--shutdown-grace", "120") as (base, proc):
        with sdk(base) as client:
            for event in client.responses.create(model="tiny-llama", stream=True, **body):
                events.append(event)
                if len(events) == 10:
                    os.kill(proc.pid, signal.SIGTERM)
        # It stops once nothing runs: long before the grace is over.
        assert proc.wait(timeout=60) == 0
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.error is None
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == 1800


def read_raw(method: str, url: str, seen: list[bytes], **kwargs: Any) -> None:
    """A body's bytes as they come (not through the SDK, which hides a cut frame), into
    `seen`; raises if the body is cut short (httpx: an incomplete chunked read)."""
    with httpx.stream(method, url, timeout=60, **kwargs) as res:
        assert res.status_code == 200, res.read()
        for chunk in res.iter_raw():
            seen.append(chunk)


def test_sigterm_ends_a_followed_background_stream_on_a_frame_boundary(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    db = tmp_path / "omni.db"
    # Greedy with its end token banned: only its 600 tokens stop it, long after the SIGTERM
    # (sent once both clients saw 5 deltas); a grace of 0 leaves it running then, for the
    # next start.
    body = {**BODY, **UNENDING, "stream": True, "max_output_tokens": 600}
    posted: list[bytes] = []  # the client that created it, streaming
    followed: list[bytes] = []  # another, following it with GET ?stream=true
    failures: list[BaseException] = []

    def run(*args: Any, **kwargs: Any) -> threading.Thread:
        def target() -> None:
            try:
                read_raw(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 (asserted on below)
                failures.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        return thread

    def deltas(seen: list[bytes]) -> int:
        return b"".join(seen).count(b"event: response.output_text.delta")

    with serving(tiny_model_dir, db, "warning", None, "--shutdown-grace", "0") as (base, proc):
        threads = [run("POST", f"{base}/v1/responses", posted, json=body)]
        until(lambda: deltas(posted) >= 1 or bool(failures))
        first = b"".join(posted).split(b"\n\n", 1)[0] + b"\n\n"  # response.created
        rid = parse_frames(first)[0].data["response"]["id"]
        threads.append(run("GET", f"{base}/v1/responses/{rid}?stream=true", followed))
        until(lambda: min(deltas(posted), deltas(followed)) >= 5 or bool(failures))
        os.kill(proc.pid, signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=60)
        assert proc.wait(timeout=60) == 0
    assert failures == []  # both bodies ended whole, not cut
    left = rows(db, rid)
    assert left[-1][1] == "response.output_text.delta"  # still running at the stop
    # Each body: every frame whole (event, data, id, a blank line), the log's first rows up
    # to what was committed when it ended (the engine may commit a few more before it exits:
    # the resume below reads them).
    before, other = parse_frames(b"".join(posted)), parse_frames(b"".join(followed))
    assert [f.id for f in before] == list(range(len(before))) and len(before) <= len(left)
    assert [f.id for f in other] == list(range(len(other))) and len(other) <= len(left)
    common = min(len(before), len(other))
    assert other[:common] == before[:common]

    with serving(tiny_model_dir, db) as (base, _):
        resumed: list[bytes] = []
        headers = {"Last-Event-ID": str(before[-1].id)}
        read_raw("GET", f"{base}/v1/responses/{rid}?stream=true", resumed, headers=headers)
    joined = before + parse_frames(b"".join(resumed))
    assert [f.id for f in joined] == [f.seq for f in joined] == list(range(len(joined)))
    assert joined[-1].event in TERMINAL
