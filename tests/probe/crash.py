"""`kill -9` rounds: clients stream responses (foreground and background) and chat
completions from a real `omni serve`, which is killed at a random moment and started again on
the same database. Every event a client saw must be in the log byte for byte, and after the
restart every stream must end (or continue to its end)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.test_cli import serving

MODEL = "tiny-llama"


@dataclass
class Seen:
    """What one client received: (seq or index, type, data) of each whole frame."""

    stream_id: str = ""
    frames: list[tuple[int, str, str]] = field(default_factory=list)
    chat: bool = False


def parse(buffer: bytes, seen: Seen) -> None:
    """Whole frames only: a frame cut by the kill was never received."""
    for raw in buffer.split(b"\n\n")[:-1]:
        lines = dict(
            line.split(": ", 1) for line in raw.decode().split("\n") if not line.startswith(":")
        )
        if "data" not in lines or lines["data"] == "[DONE]":
            continue
        data = lines["data"]
        if seen.chat:
            seen.stream_id = seen.stream_id or json.loads(data)["id"]
            seen.frames.append((len(seen.frames), "", data))
        else:
            if lines["event"] == "response.created":
                seen.stream_id = json.loads(data)["response"]["id"]
            seen.frames.append((int(lines["id"]), lines["event"], data))


def client(base: str, kind: str, seen: Seen, stop: threading.Event) -> None:
    tokens = random.randint(50, 400)
    if kind == "chat":
        seen.chat = True
        url, body = (
            f"{base}/v1/chat/completions",
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Tell me a story."}],
                "max_tokens": tokens,
                "stream": True,
                "store": True,
            },
        )
    else:
        url, body = (
            f"{base}/v1/responses",
            {
                "model": MODEL,
                "input": "Tell me a story.",
                "max_output_tokens": tokens,
                "stream": True,
                "background": kind == "background",
            },
        )
    buffer = b""
    try:
        with httpx.stream("POST", url, json=body, timeout=120) as answer:
            for chunk in answer.iter_bytes():
                buffer += chunk
                if stop.is_set():
                    break
    except httpx.HTTPError:
        pass  # the kill cut it: what arrived whole counts
    parse(buffer, seen)


@dataclass
class Rounds:
    tally: Counter[str] = field(default_factory=Counter)
    streams: list[Seen] = field(default_factory=list)
    unended: list[str] = field(default_factory=list)  # what each stream left open answered

    def check_log(self, db: Path) -> None:
        """Events lost: seen by a client, yet not in the log (or not byte for byte)."""
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            for seen in self.streams[-4:]:
                if not seen.stream_id:
                    continue
                rows = conn.execute(
                    "SELECT seq, type, data FROM events WHERE stream_id = ? ORDER BY seq",
                    (seen.stream_id,),
                ).fetchall()
                stored = {seq: (type_, data) for seq, type_, data in rows}
                for seq, type_, data in seen.frames:
                    self.tally["events seen"] += 1
                    if seen.chat:
                        found = [d for _, d in stored.values()]
                        lost = data not in found
                    else:
                        lost = stored.get(seq) != (type_, data)
                    self.tally["events lost"] += lost

    def check_ended(self, base: str) -> None:
        """After a restart: every stream so far reads to its end."""
        for seen in self.streams:
            if not seen.stream_id:
                continue
            path = "chat/completions" if seen.chat else "responses"
            final = httpx.get(f"{base}/v1/{path}/{seen.stream_id}", timeout=30)
            if not seen.chat and final.json().get("status") in ("queued", "in_progress"):
                replay = httpx.get(
                    f"{base}/v1/responses/{seen.stream_id}?stream=true", timeout=120
                ).content
                final = httpx.get(f"{base}/v1/responses/{seen.stream_id}", timeout=30)
                assert b"event: response." in replay
            body = final.json()
            if seen.chat:  # a cut-off completion is no answer: not stored, a 404
                choice = body.get("choices", [{}])[0]
                ended = final.status_code == 404 or choice.get("finish_reason") is not None
            else:
                ended = body.get("status") in ("completed", "incomplete", "failed", "cancelled")
            self.tally["stream checks"] += 1
            self.tally["streams left unended"] += not ended
            if not ended:
                self.unended.append(f"{seen.stream_id}: {json.dumps(body)[:600]}")


def kill_rounds(model: Path, db: Path, rounds: int, seed: int = 0) -> Rounds:
    """`rounds` kills, each with four clients (two background, one foreground, one chat)."""
    random.seed(seed)
    probe = Rounds()
    for _ in range(rounds):
        with serving(model, db) as (base, proc):
            probe.check_ended(base)  # what the last kill cut off has ended or continued
            stop = threading.Event()
            batch = [Seen() for _ in range(4)]
            kinds = ["background", "background", "foreground", "chat"]
            threads = [
                threading.Thread(target=client, args=(base, kind, seen, stop))
                for kind, seen in zip(kinds, batch, strict=True)
            ]
            for thread in threads:
                thread.start()
            stop.wait(random.uniform(0.5, 3.0))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            probe.streams += batch
            probe.tally["kill -9 rounds"] += 1
        probe.check_log(db)
    with serving(model, db) as (base, _):
        probe.check_ended(base)
    return probe
