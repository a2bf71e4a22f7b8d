"""Wake-ups across processes: every append on PostgreSQL sends `pg_notify(CHANNEL, stream_id)`
in its transaction (delivered at its commit, never before); one LISTEN connection per store
hands each to the process's Notifier, so a follower here wakes for a commit made by another
process. Like the Notifier, a notification carries no data: readers read the log itself.

This process's own commits are skipped (their wake-up came from the Appender already). A
lost connection is opened again; meanwhile notifications may have been missed, so every
follower is woken once it is back (each reads the log again: nothing is skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from omni.events.notifier import Notifier

log = logging.getLogger(__name__)

CHANNEL = "omni_events"
RETRY_S = (0.1, 0.5, 1.0, 2.0, 5.0)  # between attempts to listen again


class Listener:
    def __init__(self, conninfo: str, notifier: Notifier, ours: Callable[[], int | None]):
        self._conninfo = conninfo
        self._notifier = notifier
        self._ours = ours  # the backend pid of this store's writer (its commits: skipped)
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while a LISTEN connection is up (tests)

    async def start(self) -> None:
        """Listen before returning: a commit after start() wakes this process's followers."""
        await self._listen()
        self._task = asyncio.create_task(self._run(), name="omni-pg-listen")

    async def _listen(self) -> None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self.listening.set()

    async def _run(self) -> None:
        import psycopg

        attempt = 0
        while True:
            try:
                if self._conn is None:
                    await self._listen()
                    attempt = 0
                    log.info("listening to the log's notifications again")
                    self._notifier.wake_all()  # what came meanwhile went unheard
                async for note in self._conn.notifies():
                    if note.pid != self._ours():
                        self._notifier.notify((note.payload,))
            except psycopg.Error as exc:
                if self._conn is not None:
                    log.warning("lost the log's notifications (%s): listening again", exc)
                    await self._drop()
                await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
                attempt += 1

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self.listening.clear()
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # already broken: nothing more to free
                log.debug("closing the LISTEN connection failed", exc_info=True)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop()
