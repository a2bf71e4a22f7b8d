"""A SYNTHETIC engine for benchmarks only: it emits numbered tokens as fast as asked, with no
model, so a benchmark measures Omni's event pipeline (recorder, SQLite, follow, SSE) alone."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from omni.ports.chat import Capabilities
from omni.ports.jobs import Delta, Finished, Job, Started


class SyntheticEngine:
    model_id = "synthetic"
    # A plain model whose context no prompt here comes near: none is refused as too long.
    capabilities = Capabilities(context_length=1_000_000, max_token_bytes=16)
    queued = running = 0
    loading, load_error, memory_bytes, path = False, None, None, ""  # loaded; nothing to measure
    on_step = None

    def __init__(self, interval_s: float = 0.0):
        self.interval_s = interval_s
        self.emitted_at: dict[int, float] = {}  # token index -> perf_counter() at emit

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return [0] * 8

    def encode(self, text: str) -> list[int]:
        return [0] * 8

    def submit(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._run, args=(job, loop), daemon=True).start()

    def _run(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        put = job.outputs.put_nowait
        if not job.claim():
            loop.call_soon_threadsafe(put, Finished("cancelled", len(job.prompt), 0))
            return
        loop.call_soon_threadsafe(put, Started())
        n = job.sampling.max_tokens
        next_at = time.perf_counter()
        for i in range(n):
            if self.interval_s:
                next_at += self.interval_s
                time.sleep(max(0.0, next_at - time.perf_counter()))
            self.emitted_at[i] = time.perf_counter()
            loop.call_soon_threadsafe(put, Delta(f"{i} ", i))
            if job.stop.is_set():
                n = i + 1
                break
        loop.call_soon_threadsafe(put, Finished("length", len(job.prompt), n))

    def close(self) -> None:
        pass
