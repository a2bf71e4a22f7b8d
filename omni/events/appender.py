"""Group commit: everything queued while the previous commit ran goes into the next one."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from omni.errors import LeaseLost, SeqConflict, StoreError, StoreUnavailable
from omni.events.contract import Append, EventLog, StoredEvent
from omni.events.notifier import Notifier
from omni.metrics import UNREAD, Metrics

log = logging.getLogger(__name__)

# Streams remembered with a failed append (a failed stream's later appends must not commit:
# they would leave a gap). Its producer learns of the failure within a few commits; the
# oldest are forgotten past this many.
MAX_GAPS = 4096

# Appends that must commit together, and the future their producer may await.
_Item = tuple[tuple[Append, ...], "asyncio.Future[list[StoredEvent]]"]


class Appender:
    """Batches appends from many producers into one transaction, then notifies.

    Producers never wait for the disk unless they ask to (`await appender.append(...)`);
    nothing becomes visible to readers before its commit.
    """

    def __init__(
        self,
        store: EventLog,
        notifier: Notifier,
        max_batch: int = 4096,
        metrics: Metrics = UNREAD,
    ):
        self.metrics = metrics
        self.store = store
        self.notifier = notifier
        self._max_batch = max_batch
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0  # for tests and benchmarks: how many transactions ran
        self._gaps: dict[str, int] = {}  # stream -> the lowest seq an append failed at
        self.failing = 0  # appends failed since the last commit (0: writes work)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="omni-appender")

    async def stop(self) -> None:
        """Commit what is queued, then stop."""
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None

    def submit(self, *appends: Append) -> asyncio.Future[list[StoredEvent]]:
        """Queue appends that commit together; the future resolves after the commit (or
        carries the error)."""
        future: asyncio.Future[list[StoredEvent]] = asyncio.get_running_loop().create_future()
        # Fire-and-forget producers must not trigger "exception was never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.put_nowait((appends, future))
        return future

    async def append(self, *appends: Append) -> list[StoredEvent]:
        return await self.submit(*appends)

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < self._max_batch:
                batch.append(self._queue.get_nowait())
            await self._commit(batch)
            for _ in batch:
                self._queue.task_done()

    async def _commit(self, batch: Sequence[_Item]) -> None:
        batch = [item for item in batch if not self._after_gap(item)]
        if not batch:
            return
        started = time.perf_counter()
        try:
            stored = await self.store.append(
                [a for appends, _ in batch for a in appends],
            )
        except Exception as exc:  # one bad append must not sink the others: retry singly
            if len(batch) > 1:
                for item in batch:
                    await self._commit([item])
                return
            self._failed(batch[0], exc)
            return
        self._committed(batch, stored, started)

    def _committed(self, batch: Sequence[_Item], stored: list[StoredEvent], started: float) -> None:
        """Writes work (again): wake the followers, then resolve each producer's future."""
        if self.failing:
            log.info("appends to the log work again (%d failed meanwhile)", self.failing)
            self.failing = 0
        for appends, _ in batch if self._gaps else ():
            for a in appends:  # a stream continued where it failed has no gap any more
                if self._gaps.get(a.stream_id, a.first_seq) >= a.first_seq:
                    self._gaps.pop(a.stream_id, None)
        self.commits += 1
        self.metrics.commit.observe(time.perf_counter() - started)
        self.metrics.events.inc(len(stored))
        try:
            self.notifier.notify(e.stream_id for e in stored)
        except Exception:  # a wake-up must never stop the writer; readers re-read anyway
            log.exception("notify failed")
        by_key = {(e.stream_id, e.seq): e for e in stored}
        for appends, future in batch:
            if not future.done():
                future.set_result(
                    [
                        by_key[(a.stream_id, a.first_seq + i)]
                        for a in appends
                        for i in range(len(a.events))
                    ]
                )

    def _after_gap(self, item: _Item) -> bool:
        """Refuse (fail, unwritten) an append past a failed one of its stream: committed, it
        would leave the stream a gap that no reader could tell from a lost event."""
        appends, future = item
        failed = next(
            (a for a in appends if self._gaps.get(a.stream_id, a.first_seq) < a.first_seq), None
        )
        if failed is None:
            return False
        self._note_gaps(appends)
        if not future.done():
            future.set_exception(
                StoreError(f"not appended to {failed.stream_id}: an earlier append failed")
            )
        return True

    def _failed(self, item: _Item, exc: Exception) -> None:
        """One line for an outage (the disk full, the file read-only), not one per append."""
        appends, future = item
        if isinstance(exc, SeqConflict):  # the seq is taken: no gap, no outage
            log.warning("append refused: %s", exc)
        elif isinstance(exc, LeaseLost):  # another server writes it now: none of ours after
            log.warning("%s", exc)
            self._note_gaps(appends)
        else:
            self._note_gaps(appends)
            self.failing += 1
            if self.failing == 1 and not isinstance(exc, StoreUnavailable):  # (said once)
                log.warning(
                    "appends to the log fail (%s): generations that cannot record their "
                    "events stop, and end once appends work again",
                    exc,
                )
            else:
                log.debug("append failed: %s", exc)
        if not future.done():
            future.set_exception(exc)

    def _note_gaps(self, appends: Sequence[Append]) -> None:
        for a in appends:
            self._gaps[a.stream_id] = min(self._gaps.pop(a.stream_id, a.first_seq), a.first_seq)
        while len(self._gaps) > MAX_GAPS:
            del self._gaps[next(iter(self._gaps))]
