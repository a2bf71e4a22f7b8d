"""The prefix cache's disk tier through a real `omni serve`: a 10-turn conversation, a
`kill -9`, and the 11th turn reads the saved prefix from disk (usage says so) and answers as
an uninterrupted server does, greedy; then, every entry file damaged, the 12th turn loads none
(each skipped and removed, with a log line) and still answers as the uninterrupted server."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import TINY_ID
from tests.test_cli import serving

TURNS = 10
QUESTION = "Tell me more about the lighthouse and its keeper, in a few words."


def disk_flags(folder: Path) -> tuple[str, ...]:
    return ("--temp", "0", "--prompt-cache-dir", str(folder), "--prompt-cache-disk-gb", "1")


def turn(base: str, conversation: str, i: int, key: str | None = None) -> dict[str, Any]:
    body = {
        "model": TINY_ID,
        "input": f"Turn {i}. {QUESTION}",
        "conversation": conversation,
        "max_output_tokens": 8,
        "prompt_cache_key": key,
    }
    r = httpx.post(f"{base}/v1/responses", json=body, timeout=120)
    r.raise_for_status()
    return dict(r.json())


def session(
    base: str, turns: range, conversation: str | None = None, key: str | None = None
) -> tuple[str, list[Any]]:
    """Turns of a conversation (a new one unless given), in prefix-cache namespace `key`."""
    if conversation is None:
        r = httpx.post(f"{base}/v1/conversations", json={}, timeout=30)
        conversation = str(r.json()["id"])
    return conversation, [turn(base, conversation, i, key) for i in turns]


def written(kv: Path, response: dict[str, Any]) -> None:
    """Wait until the disk tier holds the cache of `response` (its prompt and its answer):
    the writer writes it moments after the turn, and a kill before then loses only that."""
    usage = response["usage"]
    held = usage["input_tokens"] + usage["output_tokens"] - 1  # its last token never fed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sidecars = [
            json.loads(p.read_bytes()) for p in kv.glob("*/*.json") if p.name != "model.json"
        ]
        if any(len(side["tokens"]) >= held for side in sidecars):
            return
        time.sleep(0.05)
    raise AssertionError(f"no entry of {held} tokens was written")


def damage(kv: Path) -> list[Path]:
    """Flip a byte in the middle of every entry's data file: the files."""
    files = list(kv.glob("*/*.safetensors"))
    for path in files:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    return files


def sample(metrics: str, series: str) -> float:
    """A series' value in /metrics' text."""
    [line] = [ln for ln in metrics.splitlines() if ln.startswith(series + " ")]
    return float(line.split()[-1])


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
    kv, db, log = tmp_path / "kv", tmp_path / "omni.db", tmp_path / "serve.log"
    with serving(tiny_model_dir, db, "warning", None, *disk_flags(kv)) as (base, proc):
        cid, before = session(base, range(TURNS))
        # The same twelve turns uninterrupted, in a prefix-cache namespace of their own (what
        # they leave on disk is never the other conversation's to read).
        _, straight = session(base, range(TURNS + 2), key="straight")
        written(kv, before[-1])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with serving(tiny_model_dir, db, "warning", None, *disk_flags(kv)) as (base, _):
        _, [eleventh] = session(base, range(TURNS, TURNS + 1), cid)
        written(kv, eleventh)
        metrics = httpx.get(f"{base}/metrics", timeout=30).text
    # `omni cache ls` names the entries' model as the server does.
    [model] = [json.loads(p.read_bytes()) for p in kv.glob("*/model.json")]
    assert model["id"] == TINY_ID
    damaged = damage(kv)
    assert damaged
    with serving(tiny_model_dir, db, "warning", log, *disk_flags(kv)) as (base, _):
        _, [twelfth] = session(base, range(TURNS + 1, TURNS + 2), cid)
    details = eleventh["usage"]["input_tokens_details"]
    # As much as the uninterrupted server reused from memory: all but the turn's new message.
    in_memory = straight[TURNS]["usage"]["input_tokens_details"]
    half = eleventh["usage"]["input_tokens"] // 2
    assert details["cached_tokens"] == in_memory["cached_tokens"] > half
    assert details["omni_disk_cached_tokens"] == details["cached_tokens"]
    assert "omni_disk_cached_tokens" not in in_memory
    assert sample(metrics, 'omni_prefix_cache_lookups_total{api="responses",result="disk"}') == 1
    reused = 'omni_prefix_cache_reused_tokens_total{api="responses",tier="disk"}'
    assert sample(metrics, reused) == details["cached_tokens"]
    assert sample(metrics, 'omni_prefix_cache_bytes{tier="disk"}') > 0
    assert [text(r) for r in before] == [text(r) for r in straight[:TURNS]]
    assert text(eleventh) == text(straight[TURNS])
    # Damaged: nothing loaded, each file removed with one line, the same answer.
    assert twelfth["usage"]["input_tokens_details"]["cached_tokens"] == 0
    assert text(twelfth) == text(straight[TURNS + 1])
    assert "checksum" in log.read_text()
    # The entry the turn would have read, damaged, is gone (one the restart never looked at
    # may stay: it is checked when it is read).
    assert not all(path.exists() for path in damaged)
