"""The prefix cache's disk tier through a real `omni serve`: a 10-turn conversation, a
`kill -9`, and the 11th turn reads the saved prefix from disk (usage says so) and answers as
an uninterrupted server does, greedy; a damaged entry file is skipped, never loaded."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import TINY_ID
from tests.test_cli import serving

TURNS = 10
QUESTION = "Tell me more about the lighthouse and its keeper, in a few words."


def disk_flags(folder: Path) -> tuple[str, ...]:
    return ("--temp", "0", "--prompt-cache-dir", str(folder), "--prompt-cache-disk-gb", "1")


def turn(base: str, conversation: str, i: int) -> dict[str, Any]:
    body = {
        "model": TINY_ID,
        "input": f"Turn {i}. {QUESTION}",
        "conversation": conversation,
        "max_output_tokens": 8,
    }
    r = httpx.post(f"{base}/v1/responses", json=body, timeout=120)
    r.raise_for_status()
    return dict(r.json())


def session(base: str, turns: range, conversation: str | None = None) -> tuple[str, list[Any]]:
    if conversation is None:
        r = httpx.post(f"{base}/v1/conversations", json={}, timeout=30)
        conversation = str(r.json()["id"])
    return conversation, [turn(base, conversation, i) for i in turns]


def text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def test_the_eleventh_turn_after_kill_9_reads_its_prefix_from_disk(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    kv, db = tmp_path / "kv", tmp_path / "omni.db"
    with serving(tiny_model_dir, db, "warning", None, *disk_flags(kv)) as (base, proc):
        cid, before = session(base, range(TURNS))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with serving(tiny_model_dir, db, "warning", None, *disk_flags(kv)) as (base, _):
        _, [eleventh] = session(base, range(TURNS, TURNS + 1), cid)
    # An uninterrupted server with no disk tier: the same eleven turns.
    with serving(tiny_model_dir, tmp_path / "other.db", "warning", None, "--temp", "0") as (
        base,
        _,
    ):
        _, straight = session(base, range(TURNS + 1))
    details = eleventh["usage"]["input_tokens_details"]
    # As much as the uninterrupted server reused from memory: all but the turn's new message.
    in_memory = straight[TURNS]["usage"]["input_tokens_details"]
    assert (
        details["cached_tokens"]
        == in_memory["cached_tokens"]
        > eleventh["usage"]["input_tokens"] // 2
    )
    assert details["omni_disk_cached_tokens"] == details["cached_tokens"]
    assert "omni_disk_cached_tokens" not in in_memory
    assert [text(r) for r in before] == [text(r) for r in straight[:TURNS]]
    assert text(eleventh) == text(straight[TURNS])
