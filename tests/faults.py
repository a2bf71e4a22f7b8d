"""Faults for tests: a disk that fills (as SQLite itself reports it) and an engine that drips
tokens until it is told to stop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from omni.events import EventStore
from omni.ports.chat import Capabilities
from omni.ports.jobs import Delta, Finished, Job

NO_BOUND = 4294967294  # SQLite's largest max_page_count (it clamps to its own)


async def disk_full(store: EventStore, full: bool = True) -> None:
    """A full disk, exactly as SQLite reports one (SQLITE_FULL, "database or disk is full"):
    no page past those the file has, on both of the store's write connections; `full=False`
    frees it again. (A small file system is not at hand in CI; this is SQLite's own bound.)"""

    def bound(conn: Any) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0] if full else NO_BOUND
        conn.execute(f"PRAGMA max_page_count={pages}")

    if store._direct is not None:
        bound(store._direct)

    def on_writer(conn: Any) -> None:
        bound(conn.connection.driver_connection)

    await store._write(on_writer)


class Dripping:
    """An engine that sends a big token every few ms until its job is cancelled (or `limit`
    tokens): `stopped` is set once a job saw its cancel, `emitted` counts what it sent."""

    model_id = "scripted"
    capabilities = Capabilities(context_length=4096, max_token_bytes=16)  # a plain model
    queued = running = 0
    loading, load_error, memory_bytes, path = False, None, None, ""  # loaded; nothing to measure
    on_step = None

    def __init__(self, limit: int = 5000, text: str = "x" * 600 + " ") -> None:
        self.limit = limit
        self.text = text  # a big token: a few of them need a new database page
        self.emitted = 0
        self.stopped = threading.Event()
        self.jobs: list[Job] = []

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return [1, 2, 3]

    def submit(self, job: Job) -> None:
        self.jobs.append(job)
        asyncio.get_running_loop().create_task(self._drip(job))

    async def _drip(self, job: Job) -> None:
        if not job.claim():
            return
        for i in range(self.limit):
            if job.stop.is_set():
                self.stopped.set()
                job.outputs.put_nowait(Finished("cancelled", 3, i))
                return
            job.outputs.put_nowait(Delta(self.text, 10 + i))
            self.emitted += 1
            await asyncio.sleep(0.002)
        job.outputs.put_nowait(Finished("length", 3, self.limit))

    def close(self) -> None:
        pass
