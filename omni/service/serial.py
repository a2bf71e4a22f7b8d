"""One writer at a time for an object's facts: metadata updates, cancel requests, deletes.

Writing a fact is read, decide, append: "not deleted yet, so the tombstone goes at seq n".
Two requests doing that at once read the same state; then one append fails on its taken seq
(30 concurrent updates: 29 conflicts), or, reading after the other committed, appends a second
tombstone. Holding the object's lock from the read to the commit makes each fact see the one
before it: every update lands, a delete happens once and the others find it deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ObjectLocks:
    """An asyncio.Lock per object id, kept only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def run(self, object_id: str, write: Callable[[], Awaitable[T]]) -> T:
        """`write` (read, decide, append) alone among this object's writers. It runs to its
        end even if the caller is cancelled meanwhile: released with its append still
        queued, the lock would let the next writer read what is no longer so."""
        task = asyncio.ensure_future(self._holding(object_id, write))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # always retrieved
        return await asyncio.shield(task)

    async def _holding(self, object_id: str, write: Callable[[], Awaitable[T]]) -> T:
        lock, users = self._locks.get(object_id, (asyncio.Lock(), 0))
        self._locks[object_id] = (lock, users + 1)
        try:
            async with lock:
                return await write()
        finally:
            lock, users = self._locks[object_id]
            if users == 1:
                del self._locks[object_id]
            else:
                self._locks[object_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
