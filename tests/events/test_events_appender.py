"""Appender: group commit, results with positions, notify after commit, isolation of failures."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest

from omni.errors import SeqConflict
from omni.events import Append, Appender, EventStore, NewEvent, Notifier, StoredEvent

from ._helpers import deltas, raw_rows


async def test_many_submits_coalesce_into_few_commits(
    store: EventStore, appender: Appender
) -> None:
    n = 200
    futures = [appender.submit(deltas(f"s{i}", 0, 2)) for i in range(n)]  # queued in one go
    results = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert appender.commits <= 2  # one transaction for (nearly) all of them
    assert appender.commits < n // 10
    assert [[(e.stream_id, e.seq) for e in r] for r in results] == [
        [(f"s{i}", 0), (f"s{i}", 1)] for i in range(n)
    ]
    assert len(raw_rows(store.path)) == 2 * n


async def test_consecutive_appends_to_one_stream_in_one_batch(
    store: EventStore, appender: Appender
) -> None:
    futures = [appender.submit(deltas("s", 3 * i, 3)) for i in range(50)]
    results = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert appender.commits <= 2
    assert [e.seq for r in results for e in r] == list(range(150))
    assert [e.seq for e in await store.read("s")] == list(range(150))


async def test_max_batch_bounds_a_transaction(store: EventStore, notifier: Notifier) -> None:
    appender = Appender(store, notifier, max_batch=10)
    appender.start()
    try:
        futures = [appender.submit(deltas(f"s{i}", 0, 1)) for i in range(100)]
        await asyncio.wait_for(asyncio.gather(*futures), 5)
    finally:
        await appender.stop()
    assert appender.commits == 10
    assert len(raw_rows(store.path)) == 100


async def test_append_returns_stored_events_with_positions(
    store: EventStore, appender: Appender
) -> None:
    first = await appender.append(deltas("s", 0, 3))
    second = await appender.append(deltas("t", 0, 2))
    assert all(isinstance(e, StoredEvent) for e in first + second)
    assert [(e.stream_id, e.seq) for e in first] == [("s", 0), ("s", 1), ("s", 2)]
    assert all(isinstance(e.position, int) and e.position > 0 for e in first + second)
    positions = [e.position for e in first + second]
    assert positions == sorted(positions) and len(set(positions)) == 5
    # exactly what the log holds
    assert await store.read("s") == first
    assert await store.read("t") == second


async def test_results_map_to_their_own_append_within_a_batch(
    store: EventStore, appender: Appender
) -> None:
    # interleaved streams in one batch: each future gets its own events, in its own order
    appends = [deltas("a", 0, 2), deltas("b", 0, 1), deltas("a", 2, 3), deltas("b", 1, 2)]
    results = await asyncio.gather(*(appender.submit(a) for a in appends))
    for append, result in zip(appends, results, strict=True):
        assert [e.stream_id for e in result] == [append.stream_id] * len(append.events)
        assert [e.seq for e in result] == [append.first_seq + i for i in range(len(append.events))]
        assert [e.data for e in result] == [x.data for x in append.events]
    by_pos = {e.position: e for e in await store.read("a") + await store.read("b")}
    for result in results:
        for e in result:
            assert by_pos[e.position] == e


class CheckingNotifier(Notifier):
    """On every notify, checks (synchronously, through a separate plain connection, and
    from a woken task through the store) that the rows are already committed."""

    def __init__(self, db_path: Path, store: EventStore, expected: dict[str, int]):
        super().__init__()
        self.db_path = db_path
        self.store = store
        self.expected = expected  # stream -> rows it must have once notified
        self.seen: list[str] = []
        self.problems: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    def notify(self, stream_ids: Iterable[str]) -> None:
        ids = list(stream_ids)
        conn = sqlite3.connect(str(self.db_path))
        try:
            for sid in ids:
                self.seen.append(sid)
                (count,) = conn.execute(
                    "SELECT count(*) FROM events WHERE stream_id=?", (sid,)
                ).fetchone()
                if count != self.expected[sid]:
                    self.problems.append(f"sync: {sid} had {count} rows when notified")
        finally:
            conn.close()
        for sid in ids:
            self.tasks.append(asyncio.create_task(self._woken_reader(sid)))
        super().notify(ids)

    async def _woken_reader(self, sid: str) -> None:
        rows = await self.store.read(sid)
        if len(rows) != self.expected[sid]:
            self.problems.append(f"async: {sid} read {len(rows)} rows when woken")


async def test_notify_happens_only_after_commit(store: EventStore, db_path: Path) -> None:
    expected = {f"s{i}": 3 for i in range(30)}
    notifier = CheckingNotifier(db_path, store, expected)
    appender = Appender(store, notifier)
    appender.start()
    try:
        # one big batch, then several small ones
        batch = [appender.submit(deltas(f"s{i}", 0, 3)) for i in range(20)]
        singles = []
        for i in range(20, 30):
            singles.append(appender.submit(deltas(f"s{i}", 0, 3)))
            await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.gather(*batch, *singles), 5)
    finally:
        await appender.stop()
    await asyncio.gather(*notifier.tasks)
    assert notifier.problems == []
    assert sorted(set(notifier.seen)) == sorted(expected)  # every stream was notified
    assert len(notifier.tasks) == len(notifier.seen) >= 30


async def test_follower_woken_by_notify_reads_the_rows(
    store: EventStore, notifier: Notifier, appender: Appender
) -> None:
    # A follower that only reads once per wake-up (no retry loop) must find the rows.
    woke_with: list[int] = []
    with notifier.subscribe("s") as wake:
        for i in range(5):
            wake.clear()
            appender.submit(deltas("s", 2 * i, 2))
            await asyncio.wait_for(wake.wait(), 2)
            woke_with.append(len(await store.read("s")))
    assert woke_with == [2, 4, 6, 8, 10]


async def test_conflict_fails_only_its_own_future(
    store: EventStore, notifier: Notifier, appender: Appender
) -> None:
    await appender.append(deltas("taken", 0, 1))
    commits_before = appender.commits

    futures = [
        appender.submit(deltas("a", 0, 2)),
        appender.submit(deltas("taken", 0, 1)),  # conflicts with the row above
        appender.submit(deltas("c", 0, 1)),
        appender.submit(deltas("a", 2, 1)),  # depends on the first one in the same batch
    ]
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)

    assert isinstance(results[1], SeqConflict)
    assert [e.seq for e in results[0]] == [0, 1]  # type: ignore[union-attr]
    assert [e.seq for e in results[2]] == [0]  # type: ignore[union-attr]
    assert [e.seq for e in results[3]] == [2]  # type: ignore[union-attr]
    assert [e.seq for e in await store.read("a")] == [0, 1, 2]
    assert [e.seq for e in await store.read("c")] == [0]
    assert len(await store.read("taken")) == 1
    assert appender.commits > commits_before

    # the appender goes on working
    after = await asyncio.wait_for(appender.append(deltas("c", 1, 1)), 2)
    assert [e.seq for e in after] == [1]


async def test_one_submit_of_several_appends_commits_together(
    store: EventStore, appender: Appender
) -> None:
    stored = await appender.append(
        Append("resp_x/request", 0, [NewEvent("omni.request.accepted", "{}")]),
        deltas("resp_x", 0, 2),
    )
    assert [(e.stream_id, e.seq) for e in stored] == [
        ("resp_x/request", 0),
        ("resp_x", 0),
        ("resp_x", 1),
    ]
    assert len({e.created_at for e in stored}) == 1  # one transaction
    assert await store.read("resp_x") == stored[1:]


async def test_a_conflicting_group_fails_whole_while_the_batch_commits(
    store: EventStore, appender: Appender, db_path: Path
) -> None:
    await appender.append(deltas("taken", 0, 1))
    futures = [
        appender.submit(deltas("a", 0, 1)),
        # a group: its first append alone would be fine, its second conflicts
        appender.submit(deltas("group_ok_part", 0, 2), deltas("taken", 0, 1)),
        appender.submit(deltas("b", 0, 1)),
    ]
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
    assert isinstance(results[1], SeqConflict)
    assert [e.stream_id for e in results[0]] == ["a"]  # type: ignore[union-attr]
    assert [e.stream_id for e in results[2]] == ["b"]  # type: ignore[union-attr]
    # the group is all or nothing: its good half is not in the log
    assert await store.read("group_ok_part") == []
    assert sorted({r[1] for r in raw_rows(db_path)}) == ["a", "b", "taken"]


async def test_two_producers_racing_for_the_same_seq(store: EventStore, appender: Appender) -> None:
    f1 = appender.submit(deltas("s", 0, 1))
    f2 = appender.submit(deltas("s", 0, 2))
    r1, r2 = await asyncio.gather(f1, f2, return_exceptions=True)
    assert [e.seq for e in r1] == [0]  # type: ignore[union-attr]  # first in, first served
    assert isinstance(r2, SeqConflict)
    assert [e.seq for e in await store.read("s")] == [0]


async def test_fire_and_forget_failure_is_not_reported_as_unretrieved(
    store: EventStore, appender: Appender, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    handler = Collect()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    # The appender's own warning carries the exception; a captured log record would keep
    # the future alive, so that logger is muted here.
    monkeypatch.setattr(logging.getLogger("omni.events.appender"), "disabled", True)
    try:
        await appender.append(deltas("s", 0, 1))
        future = appender.submit(deltas("s", 0, 1))  # will conflict; nobody awaits it
        await asyncio.wait_for(asyncio.wait([future]), 2)  # wait() does not retrieve it
        assert future.done()
        # peek without retrieving (calling .exception() would mark it retrieved)
        assert isinstance(future._exception, SeqConflict)  # type: ignore[attr-defined]
        await appender.append(deltas("s", 1, 1))  # the appender lets go of its last batch
        del future
        gc.collect()
        await asyncio.sleep(0)
    finally:
        asyncio_log.removeHandler(handler)
    assert not [m for m in handler.messages if "never retrieved" in m]


async def test_stop_commits_what_was_queued(store: EventStore, notifier: Notifier) -> None:
    appender = Appender(store, notifier)
    appender.start()
    futures = [appender.submit(deltas("s", i, 1)) for i in range(50)]
    futures += [appender.submit(deltas(f"t{i}", 0, 1)) for i in range(50)]
    await asyncio.wait_for(appender.stop(), 5)
    assert all(f.done() and f.exception() is None for f in futures)
    assert [e.seq for e in await store.read("s")] == list(range(50))
    assert len(raw_rows(store.path)) == 100
    await appender.stop()  # a second stop is a no-op


async def test_stop_without_start_is_a_noop(store: EventStore, notifier: Notifier) -> None:
    appender = Appender(store, notifier)
    await asyncio.wait_for(appender.stop(), 1)
    assert appender.commits == 0
