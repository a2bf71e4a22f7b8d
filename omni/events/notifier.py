"""Wake-ups without data: "stream X has new rows". Readers always read the log itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class Notifier:
    """Per-stream wake-ups for followers on one event loop."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._idle: dict[str, asyncio.Event] = {}
        self.stopped = False  # the server stops: followers that end at a stop end

    def stop(self) -> None:
        """The server stops: every follower reads again, and those that end at a stop end
        there, after what is committed (set first: a follower reading after this sees it)."""
        self.stopped = True
        self.wake_all()

    @contextmanager
    def subscribe(self, stream_id: str) -> Iterator[asyncio.Event]:
        """Register a wake-up before the first read, so no commit can slip between."""
        wake = asyncio.Event()
        self._waiters.setdefault(stream_id, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiters.get(stream_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[stream_id]
                    idle = self._idle.pop(stream_id, None)
                    if idle is not None:
                        idle.set()

    def notify(self, stream_ids: Iterable[str]) -> None:
        for stream_id in set(stream_ids):
            for wake in self._waiters.get(stream_id, ()):
                wake.set()

    def wake_all(self) -> None:
        """Every follower reads again (wake-ups from elsewhere may have been missed)."""
        for waiters in self._waiters.values():
            for wake in waiters:
                wake.set()

    def followers(self, stream_id: str) -> int:
        return len(self._waiters.get(stream_id, ()))

    async def wait_idle(self, stream_id: str) -> None:
        """Return once nobody follows the stream (used before purging it)."""
        if not self._waiters.get(stream_id):
            return
        idle = self._idle.setdefault(stream_id, asyncio.Event())
        await idle.wait()
