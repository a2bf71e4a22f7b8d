"""How long one heavy request takes, and how long /health waits meanwhile (figures for the
probe's report; no test asserts on time)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Stall:
    status: int
    seconds: float
    worst_health_s: float
    peak_rss_mb: int


def peak_rss_mb(pid: int) -> int:
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(status["VmHWM"].split()[0]) // 1024


def stall(base: str, pid: int, path: str, body: dict[str, object]) -> Stall:
    raw = json.dumps(body).encode()
    waits: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            start = time.monotonic()
            httpx.get(f"{base}/health", timeout=600)
            waits.append(time.monotonic() - start)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    start = time.monotonic()
    answer = httpx.post(
        f"{base}{path}", content=raw, headers={"content-type": "application/json"}, timeout=600
    )
    seconds = time.monotonic() - start
    done.set()
    watcher.join()
    return Stall(answer.status_code, seconds, max(waits, default=0.0), peak_rss_mb(pid))


def items(n: int) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: the quick fox"}
        for i in range(n)
    ]
