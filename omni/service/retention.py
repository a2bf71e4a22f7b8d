"""Retention: a running server purges the objects that ended longer ago than its retention, at
start-up and then on a schedule, through its own store (so its memory of recent rows forgets
them with the log). Freed pages are reused by later appends; the file shrinks only under
`omni db purge` (VACUUM), with the server stopped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import closing

from omni.events import EventStore
from omni.events.backends import LogStore
from omni.events.maintenance import PER_TRANSACTION, Finished, Vocabulary
from omni.events.postgres import maintenance as pg_maintenance
from omni.events.sqlite.maintenance import connect, finished
from omni.settings import ServerSettings
from omni.vocabulary import (
    ACCEPTED,
    COMPLETION_CANCELLED,
    COMPLETION_DELETED,
    COMPLETION_ERROR,
    COMPLETION_USAGE,
    CONVERSATION_DELETED,
    DELETED,
    MESSAGE_CANCELLED,
    MESSAGE_ERROR,
    MESSAGE_STOP,
)

log = logging.getLogger(__name__)

# What maintenance needs to know of the log's types. A cancelled response ends with
# response.incomplete whose response says "cancelled": its status is read from the data.
VOCABULARY = Vocabulary(
    ends={
        "response.completed": "completed",
        "response.failed": "failed",
        "response.incomplete": "$.response.status",
        COMPLETION_USAGE["chat"]: "completed",
        COMPLETION_USAGE["text"]: "completed",
        COMPLETION_ERROR: "failed",
        COMPLETION_CANCELLED: "cancelled",
        MESSAGE_STOP: "completed",
        MESSAGE_ERROR: "failed",
        MESSAGE_CANCELLED: "cancelled",
    },
    deleted=frozenset({DELETED, COMPLETION_DELETED}),
    accepted=ACCEPTED,
    closed=frozenset({CONVERSATION_DELETED}),
)
STATUSES = ("completed", "incomplete", "failed", "cancelled", "deleted")


class Retention:
    def __init__(
        self, store: LogStore, max_age_s: float, every_s: float = ServerSettings.retention_every_s
    ):
        self.store = store
        self.max_age_ms = int(max_age_s * 1000)
        self.every_s = every_s
        self.passes = 0  # purge passes done (tests wait on it)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._schedule(), name="omni-retention")

    async def _schedule(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a failed pass is logged; the next one tries again
                log.exception("retention pass failed")
            self.passes += 1
            await asyncio.sleep(self.every_s)

    async def run_once(self) -> tuple[list[Finished], int]:
        """One pass: the objects removed and the events they held."""
        before = int(time.time() * 1000) - self.max_age_ms
        store = self.store
        if isinstance(store, EventStore):
            # Found on a connection of its own, off the loop: a big log's scan holds no lock.
            doomed = await asyncio.to_thread(_finished, store.path, before)
        else:  # PostgreSQL: one read of the server's pool (its snapshot blocks no writer)
            doomed = await store.run_read(
                lambda conn: pg_maintenance.finished(conn, VOCABULARY, before)
            )
        removed = 0
        for start in range(0, len(doomed), PER_TRANSACTION):
            batch = [f.id for f in doomed[start : start + PER_TRANSACTION]]
            removed += await self.store.purge_objects(batch)
        if doomed:
            log.info("retention purged %d objects (%d events)", len(doomed), removed)
        return doomed, removed

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


def _finished(path: str, before_ms: int) -> list[Finished]:
    with closing(connect(path)) as conn:
        return finished(conn, VOCABULARY, before_ms)
