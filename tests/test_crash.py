"""A real crash: `omni serve` killed with SIGKILL mid-generation, then started again on the
same database. Nothing committed is lost and background work carries on where it stopped."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.test_cli import kill_mid_stream, serving

BODY = {"model": "tiny-llama", "input": "Tell me a long story.", "background": True}
MAX_TOKENS = 400  # ten times the 40 deltas the kill waits for: still running when killed


def frames(raw: bytes) -> list[bytes]:
    return [f + b"\n\n" for f in raw.split(b"\n\n") if f and not f.startswith(b":")]


def seq_of(frame: bytes) -> int:
    return int(frame.rsplit(b"\nid: ", 1)[1].split(b"\n")[0])


def replay(base: str, response_id: str, timeout: float = 60) -> list[bytes]:
    url = f"{base}/v1/responses/{response_id}?stream=true"
    return frames(httpx.get(url, timeout=timeout).content)


def greedy_text(base: str, max_tokens: int) -> str:
    body = {**BODY, "background": False, "temperature": 0, "max_output_tokens": max_tokens}
    return httpx.post(f"{base}/v1/responses", json=body, timeout=120).json()["output"][0][
        "content"
    ][0]["text"]


@dataclass
class Killed:
    """An `omni serve` killed with SIGKILL in the middle of three background responses,
    followed live, and its log copied as the kill left it (for a restart with another model)."""

    db: Path
    copy: Path
    ids: list[str]
    seen: list[bytes]  # the frames the follower of the first one received, whole ones only


@pytest.fixture(scope="module")
def killed(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Killed:
    db = tmp_path_factory.mktemp("killed") / "omni.db"
    with serving(tiny_model_dir, db) as (base, proc):
        body = {**BODY, "temperature": 0, "max_output_tokens": MAX_TOKENS}
        ids = [httpx.post(f"{base}/v1/responses", json=body).json()["id"] for _ in range(3)]
        # Follow the running one live, and kill the server in the middle of it.
        buffer = kill_mid_stream(base, ids[0], proc, 40)
        seen = frames(buffer.rsplit(b"\n\n", 1)[0] + b"\n\n")  # whole frames only
    copy = tmp_path_factory.mktemp("killed-copy") / "omni.db"
    for name in (db.name, f"{db.name}-wal"):
        if (db.parent / name).exists():
            shutil.copyfile(db.parent / name, copy.parent / name)
    return Killed(db, copy, ids, seen)


def test_kill_9_then_restart_continues_background_work(
    killed: Killed, tiny_model_dir: Path
) -> None:
    db, ids, seen, max_tokens = killed.db, killed.ids, killed.seen, MAX_TOKENS

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    with serving(tiny_model_dir, db) as (base, _):
        # The interrupted follower reconnects where it stopped and gets the rest, live.
        url = f"{base}/v1/responses/{ids[0]}?stream=true&starting_after={seq_of(seen[-1])}"
        rest = frames(httpx.get(url, timeout=60).content)
        replays = [replay(base, i) for i in ids]
        finals = [httpx.get(f"{base}/v1/responses/{i}").json() for i in ids]
        reference = greedy_text(base, max_tokens)

    for final, events in zip(finals, replays, strict=True):
        assert final["status"] in ("completed", "incomplete")
        assert [seq_of(f) for f in events] == list(range(len(events)))  # contiguous across
        assert events[-1].startswith(b"event: response.completed") or events[-1].startswith(
            b"event: response.incomplete"
        )
    # Every event a client saw before the kill is in the log, byte for byte.
    assert len(seen) > 40
    assert replays[0][: len(seen)] == seen
    assert seen + rest == replays[0]
    # Greedy decoding carried on token-exactly: the text equals an uninterrupted generation.
    assert finals[0]["output"][0]["content"][0]["text"] == reference


def test_restart_with_another_model_ends_background_work_incomplete(
    killed: Killed, tmp_path: Path
) -> None:
    from omni.testing.llama import build_tiny_llama

    db, response_id = killed.copy, killed.ids[0]  # the log as the kill left it
    other = build_tiny_llama(tmp_path / "other-llama", seed=1)
    with serving(other, db) as (base, _):
        final = httpx.get(f"{base}/v1/responses/{response_id}").json()
        events = replay(base, response_id)
    assert final["status"] == "incomplete"
    assert "cannot be continued" in final["error"]["message"]
    assert "other-llama" in final["error"]["message"]
    assert final["output"][0]["status"] == "incomplete"
    assert events[-1].startswith(b"event: response.incomplete")
    assert [seq_of(f) for f in events] == list(range(len(events)))


def test_reasoning_tokens_survive_a_restart(tmp_path: Path) -> None:
    """A reasoning model's background response continued after a kill counts the reasoning
    tokens made before it too: here the block never closes, so every output token is one."""
    from omni.testing.llama import build_tiny_llama

    model = build_tiny_llama(tmp_path / "tiny-thinker", thinking=True)
    eos, think, end_think = 2, 3, 4  # ids in the tiny tokenizer: never end, never close
    body = {
        **BODY,
        "model": "tiny-thinker",
        "temperature": 0,
        "max_output_tokens": 400,
        "logit_bias": {str(t): -100 for t in (eos, think, end_think)},
    }
    db = tmp_path / "omni.db"
    with serving(model, db) as (base, proc):
        response_id = httpx.post(f"{base}/v1/responses", json=body).json()["id"]
        url = f"{base}/v1/responses/{response_id}?stream=true"
        deltas = 0
        with httpx.stream("GET", url, timeout=60) as stream:
            for line in stream.iter_lines():
                deltas += line == "event: response.reasoning_text.delta"
                if deltas == 20:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
    with serving(model, db) as (base, _):
        replay(base, response_id)  # to its end
        final = httpx.get(f"{base}/v1/responses/{response_id}").json()
    assert final["status"] == "incomplete", final["status"]
    usage = final["usage"]
    assert usage["output_tokens"] == 400
    assert usage["output_tokens_details"]["reasoning_tokens"] == 400
