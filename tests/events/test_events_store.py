"""EventStore against a real SQLite file: append, read, conflicts, WAL, errors."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from omni.errors import OmniError, SeqConflict, StoreError
from omni.events import Append, EventStore, NewEvent, StoredEvent

from ._helpers import deltas, ev, finished_chat, raw_rows


async def test_append_new_stream_reads_back_in_seq_order(store: EventStore) -> None:
    events = [
        NewEvent("response.created", '{"type":"response.created","sequence_number":0}'),
        NewEvent("response.in_progress", '{"type":"response.in_progress","sequence_number":1}'),
        NewEvent("response.output_text.delta", '{"delta":"Hi","sequence_number":2}'),
        NewEvent("response.completed", '{"type":"response.completed","sequence_number":3}'),
    ]
    stored = await store.append([Append("resp_1", 0, events)])

    assert [e.seq for e in stored] == [0, 1, 2, 3]
    assert all(isinstance(e, StoredEvent) for e in stored)
    assert all(e.stream_id == "resp_1" for e in stored)

    read = await store.read("resp_1")
    assert read == stored
    assert [(e.seq, e.type, e.data) for e in read] == [
        (i, n.type, n.data) for i, n in enumerate(events)
    ]
    # positions are the table's, and increase with seq
    assert [e.position for e in read] == sorted(e.position for e in read)
    assert len({e.position for e in read}) == 4
    # the store returns exactly what the plain driver sees
    assert raw_rows(store.path, "resp_1") == [
        (e.position, e.stream_id, e.seq, e.type, e.data, e.created_at) for e in read
    ]


async def test_read_orders_by_seq_not_insertion(store: EventStore) -> None:
    # Two appends in one call, the later seqs listed first: read still orders by seq.
    await store.append([deltas("s", 3, 2), deltas("s", 0, 3)])
    assert [e.seq for e in await store.read("s")] == [0, 1, 2, 3, 4]


async def test_read_after_and_limit(store: EventStore) -> None:
    await store.append([deltas("s", 0, 10)])
    assert [e.seq for e in await store.read("s", after=4)] == [5, 6, 7, 8, 9]
    assert [e.seq for e in await store.read("s", after=-1, limit=3)] == [0, 1, 2]
    assert [e.seq for e in await store.read("s", after=6, limit=2)] == [7, 8]
    assert await store.read("s", after=9) == []
    assert await store.read("s", after=100) == []
    assert await store.read("nope") == []
    assert await store.read("s", limit=0) == []


async def test_last_and_next_seq_empty_and_non_empty(store: EventStore) -> None:
    assert await store.last("s") is None
    assert await store.next_seq("s") == 0

    await store.append([deltas("s", 0, 3)])
    last = await store.last("s")
    assert last is not None and last.seq == 2 and last.stream_id == "s"
    assert await store.next_seq("s") == 3

    await store.append([deltas("s", 3, 1)])
    assert (await store.last("s")).seq == 3  # type: ignore[union-attr]
    assert await store.next_seq("s") == 4
    # another stream is independent
    assert await store.next_seq("t") == 0
    assert await store.last("t") is None


async def test_one_append_carries_several_streams_in_one_transaction(
    store: EventStore, db_path: Path
) -> None:
    before = raw_rows(db_path)
    stored = await store.append(
        [
            Append("resp_A/request", 0, [ev("omni.request.accepted", input="hi")]),
            Append("resp_A", 0, [ev("response.created"), ev("response.in_progress")]),
            Append("resp_B", 0, [ev("response.created")]),
        ]
    )
    assert before == []
    assert [(e.stream_id, e.seq) for e in stored] == [
        ("resp_A/request", 0),
        ("resp_A", 0),
        ("resp_A", 1),
        ("resp_B", 0),
    ]
    # one transaction: one created_at stamp and contiguous positions
    assert len({e.created_at for e in stored}) == 1
    positions = [e.position for e in stored]
    assert positions == list(range(positions[0], positions[0] + 4))
    assert len(await store.read("resp_A/request")) == 1
    assert len(await store.read("resp_A")) == 2
    assert len(await store.read("resp_B")) == 1


async def test_empty_append_writes_nothing(store: EventStore, db_path: Path) -> None:
    assert await store.append([]) == []
    assert await store.append([Append("s", 0, [])]) == []
    assert raw_rows(db_path) == []


async def test_seq_conflict_writes_nothing(store: EventStore, db_path: Path) -> None:
    await store.append([deltas("s", 0, 2)])
    before = raw_rows(db_path)

    with pytest.raises(SeqConflict) as info:
        await store.append(
            [
                Append("other", 0, [ev("x"), ev("y")]),  # would be fine alone
                deltas("s", 2, 1),  # fine alone too
                deltas("s", 1, 1),  # seq 1 exists: conflict
            ]
        )
    err = info.value
    assert isinstance(err, OmniError) and isinstance(err, StoreError)
    assert not err.public  # the driver's text is for the log: a client reads a plain 500

    # atomic: nothing of the failed transaction is there
    assert raw_rows(db_path) == before
    assert await store.read("other") == []
    assert await store.next_seq("s") == 2
    # and the store still works afterwards (the writer was rolled back, not wedged)
    ok = await store.append([Append("other", 0, [ev("x")])])
    assert [e.seq for e in ok] == [0]


async def test_duplicate_seq_inside_one_append_conflicts(store: EventStore, db_path: Path) -> None:
    with pytest.raises(SeqConflict):
        await store.append([deltas("s", 0, 2), deltas("s", 1, 1)])
    assert raw_rows(db_path) == []


async def test_positions_strictly_increase_across_streams_in_commit_order(
    store: EventStore, db_path: Path
) -> None:
    committed: list[StoredEvent] = []
    next_seq = {"a": 0, "b": 0, "c": 0}
    for i in range(30):
        sid = "abc"[(i * 7) % 3]
        n = 1 + i % 3
        committed += await store.append([deltas(sid, next_seq[sid], n)])
        next_seq[sid] += n
    positions = [e.position for e in committed]
    assert all(p < q for p, q in zip(positions, positions[1:], strict=False))
    # the log's global order is the commit order
    assert [r[0] for r in raw_rows(db_path)] == positions
    assert [(r[1], r[2]) for r in raw_rows(db_path)] == [(e.stream_id, e.seq) for e in committed]


async def test_positions_never_reused_after_purge(store: EventStore) -> None:
    first = await store.append([deltas("s", 0, 3)])
    assert await store.purge(["s"]) == 3
    again = await store.append([deltas("s", 0, 1)])
    assert again[0].position > max(e.position for e in first)


async def test_concurrent_appends_to_different_streams_all_commit(store: EventStore) -> None:
    results = await asyncio.gather(*(store.append([deltas(f"s{i}", 0, 5)]) for i in range(20)))
    positions = sorted(e.position for r in results for e in r)
    assert len(set(positions)) == 100
    for i in range(20):
        assert [e.seq for e in await store.read(f"s{i}")] == [0, 1, 2, 3, 4]


async def test_by_type_in_log_order_and_after_position(store: EventStore) -> None:
    await store.append([Append("r1/request", 0, [ev("omni.request.accepted", n=1)])])
    await store.append([deltas("r1", 0, 3)])
    await store.append([Append("r2/request", 0, [ev("omni.request.accepted", n=2)])])
    await store.append([Append("r1/request", 1, [ev("omni.request.cancel")])])
    await store.append([Append("r3/request", 0, [ev("omni.request.accepted", n=3)])])

    accepted = await store.by_type("omni.request.accepted")
    assert [e.stream_id for e in accepted] == ["r1/request", "r2/request", "r3/request"]
    assert all(e.type == "omni.request.accepted" for e in accepted)
    assert [e.position for e in accepted] == sorted(e.position for e in accepted)

    later = await store.by_type("omni.request.accepted", after_position=accepted[0].position)
    assert [e.stream_id for e in later] == ["r2/request", "r3/request"]
    assert await store.by_type("omni.request.accepted", after_position=accepted[-1].position) == []
    assert await store.by_type("no.such.type") == []


async def test_purge_removes_whole_streams_only(store: EventStore, db_path: Path) -> None:
    await store.append(
        [
            deltas("resp_a", 0, 3),
            deltas("resp_a/request", 0, 1),
            deltas("resp_ab", 0, 2),
            deltas("resp_b", 0, 2),
            deltas("resp_", 0, 1),
        ]
    )
    assert await store.purge(["resp_a", "resp_b"]) == 5
    assert await store.read("resp_a") == []
    assert await store.read("resp_b") == []
    # prefix-sharing and sub-streams are other streams: untouched
    assert len(await store.read("resp_a/request")) == 1
    assert len(await store.read("resp_ab")) == 2
    assert len(await store.read("resp_")) == 1
    assert sorted({r[1] for r in raw_rows(db_path)}) == ["resp_", "resp_a/request", "resp_ab"]
    assert await store.purge([]) == 0
    assert await store.purge(["missing"]) == 0
    assert len(raw_rows(db_path)) == 4


async def test_created_at_is_unix_ms(store: EventStore) -> None:
    lo = int(time.time() * 1000)
    stored = await store.append([deltas("s", 0, 1)])
    hi = int(time.time() * 1000)
    created = stored[0].created_at
    assert isinstance(created, int)
    assert lo <= created <= hi
    assert (await store.read("s"))[0].created_at == created


async def test_data_is_stored_byte_for_byte(store: EventStore, db_path: Path) -> None:
    samples = [
        '{"delta":"héllo — 日本語 🎉 مرحبا"}',  # raw non-ASCII, astral plane
        '{"delta":"\\u00e9\\ud83c\\udf89"}',  # JSON escapes must stay escapes
        '{"delta":"line1\\nline2\\t\\"quoted\\" back\\\\slash \\u0000"}',
        '{"a": 1,   "b" :[ ]}\n',  # odd spacing and a trailing newline: not re-serialised
        "",
        "'; DROP TABLE events; --",
        "x" * 100_000,
    ]
    await store.append([Append("s", 0, [NewEvent("t", d) for d in samples])])

    assert [e.data for e in await store.read("s")] == samples
    with sqlite3.connect(str(db_path)) as conn:
        raw = conn.execute(
            "SELECT typeof(data), CAST(data AS BLOB) FROM events WHERE stream_id='s' ORDER BY seq"
        ).fetchall()
    conn.close()
    assert [t for t, _ in raw] == ["text"] * len(samples)
    assert [b for _, b in raw] == [d.encode("utf-8") for d in samples]


async def test_unfinished_lists_streams_without_an_end(store: EventStore) -> None:
    await store.append([Append("r1", 0, [ev("response.created"), ev("response.completed")])])
    await store.append([Append("r2", 0, [ev("response.created"), ev("response.in_progress")])])
    await store.append([Append("r3", 0, [ev("response.in_progress")])])  # did not begin so
    await store.append([Append("r4", 0, [ev("response.created")])])
    await store.append([Append("r5", 0, [ev("response.created"), ev("response.failed")])])
    await store.append([Append("r2/request", 0, [ev("response.completed")])])  # other stream
    await store.append([Append("r6", 0, [ev("x"), ev("response.created")])])  # not at seq 0

    ends = ["response.completed", "response.failed", "response.incomplete"]
    assert await store.unfinished("response.created", ends) == ["r2", "r4"]
    await store.append([Append("r4", 1, [ev("response.incomplete")])])
    assert await store.unfinished("response.created", ends) == ["r2"]
    assert await store.unfinished("response.created", []) == ["r1", "r2", "r4", "r5"]


async def test_pragmas_report_wal_and_synchronous(store: EventStore) -> None:
    assert await store.pragmas() == {
        "journal_mode": "wal",
        "synchronous": "NORMAL",
        "secure_delete": True,  # a purge leaves zeros, not the bytes it removed
    }


def test_wal_mode_is_on(db_path: Path) -> None:
    with sqlite3.connect(str(db_path)) as conn:
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    conn.close()
    assert mode.lower() == "wal"


async def test_wal_mode_on_after_store_open_on_fresh_file(tmp_path: Path) -> None:
    # A store on a brand-new (unmigrated) file still switches it to WAL.
    path = tmp_path / "fresh.db"
    s = EventStore(str(path))
    await s.open()
    try:
        with sqlite3.connect(str(path)) as conn:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        conn.close()
        assert mode.lower() == "wal"
    finally:
        await s.close()


async def test_reader_reads_while_a_writer_holds_a_transaction(
    store: EventStore, db_path: Path
) -> None:
    await store.append([deltas("s", 0, 2)])
    # Another writer shares the file here, so this store must not answer from its memory.
    store = EventStore(str(db_path), recent_rows=0)
    await store.open()
    writer = sqlite3.connect(str(db_path), isolation_level=None, timeout=0.1)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?,?,?,?,?)",
            ("s", 2, "t", "{}", 0),
        )
        # The write lock is held and the row is uncommitted: the store's readers must not
        # block (busy_timeout is 5 s) and must not see the uncommitted row.
        start = time.perf_counter()
        rows = await asyncio.wait_for(store.read("s"), 2)
        assert [e.seq for e in rows] == [0, 1]
        assert await store.next_seq("s") == 2
        assert time.perf_counter() - start < 1.0
        writer.execute("COMMIT")
    finally:
        writer.close()
    assert [e.seq for e in await store.read("s")] == [0, 1, 2]
    await store.close()


async def test_readers_do_not_wait_for_the_stores_own_open_write_transaction(
    store: EventStore,
) -> None:
    from omni.events.schema import events as table
    from omni.events.sqlite.recent import RecentRows

    store._recent = RecentRows(per_stream=0)  # this test writes behind the store's back
    await store.append([deltas("s", 0, 1)])
    inserted, release = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:  # the store's writer, mid-transaction
        conn.execute(
            table.insert(),
            [{"stream_id": "s", "seq": 1, "type": "t", "data": "{}", "created_at": 0}],
        )
        inserted.set()
        release.wait(5)

    held = asyncio.ensure_future(store._write(hold))
    try:
        assert await asyncio.to_thread(inserted.wait, 5)
        rows = await asyncio.wait_for(store.read("s"), 2)
        assert [e.seq for e in rows] == [0]  # uncommitted row invisible, no blocking
    finally:
        release.set()
    await held
    assert [e.seq for e in await store.read("s")] == [0, 1]


async def test_writes_begin_immediate_reads_begin_deferred(store: EventStore) -> None:
    from sqlalchemy import event as sa_event

    from omni.events.sqlite.recent import RecentRows

    store._recent = RecentRows(per_stream=0)  # make the read reach SQLite
    seen: dict[str, list[str]] = {"writer": [], "reader": []}
    assert store._writer is not None and store._reader is not None
    for name, engine in (("writer", store._writer), ("reader", store._reader.sync_engine)):

        def record(conn, cursor, statement, *args, _name=name):
            if statement.upper().startswith("BEGIN"):
                seen[_name].append(statement.upper())

        sa_event.listen(engine, "before_cursor_execute", record)
    direct: list[str] = []  # the event loop's own connection, for appends
    assert store._direct is not None
    store._direct.set_trace_callback(lambda sql: direct.append(sql.split()[0].upper()))
    await store.append([deltas("s", 0, 1)])
    await store.purge(["nothing"])
    await store.read("s")
    # One transaction: each trigger on `events` (the item index's, the replay cache's, the
    # summaries' and the search index's) runs under the INSERT, traced as statements of its
    # own (FTS5 reads its settings the first time: a PRAGMA and a SELECT).
    assert direct[0] == "BEGIN" and direct[-1] == "COMMIT" and "INSERT" in direct
    ends = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END"}
    assert not ends & set(direct[1:-1]), direct
    assert seen["writer"] == ["BEGIN IMMEDIATE"]  # the purge
    assert seen["reader"] == ["BEGIN"]


async def test_append_waits_for_another_writer_then_commits(
    store: EventStore, db_path: Path
) -> None:
    other = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        task = asyncio.create_task(store.append([deltas("s", 0, 1)]))
        await asyncio.sleep(0.15)
        assert not task.done()  # waiting for the lock (busy_timeout), not failing
        other.execute("COMMIT")
        stored = await asyncio.wait_for(task, 3)
    finally:
        other.close()
    assert [e.seq for e in stored] == [0]
    assert [e.seq for e in await store.read("s")] == [0]


async def test_store_writes_while_a_reader_holds_a_snapshot(
    store: EventStore, db_path: Path
) -> None:
    await store.append([deltas("s", 0, 1)])
    reader = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM events").fetchone() == (1,)
        # an open read transaction does not block the writer in WAL mode
        await asyncio.wait_for(store.append([deltas("s", 1, 1)]), 2)
        # the old snapshot is stable...
        assert reader.execute("SELECT count(*) FROM events").fetchone() == (1,)
        reader.execute("COMMIT")
        # ...and a new one sees the commit
        assert reader.execute("SELECT count(*) FROM events").fetchone() == (2,)
    finally:
        reader.close()


async def test_integrity_ok_after_many_appends(store: EventStore, db_path: Path) -> None:
    seqs: dict[str, int] = {}
    for i in range(200):
        batch = []
        for sid in (f"s{i % 7}", f"t{i % 3}"):
            n = 1 + (i * 5) % 4
            batch.append(deltas(sid, seqs.get(sid, 0), n))
            seqs[sid] = seqs.get(sid, 0) + n
        await store.append(batch)
    await store.purge(["s0", "t1"])

    with sqlite3.connect(str(db_path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
    conn.close()
    assert count == sum(n for sid, n in seqs.items() if sid not in ("s0", "t1"))
    for sid, n in seqs.items():
        if sid not in ("s0", "t1"):
            assert [e.seq for e in await store.read(sid)] == list(range(n))


async def test_close_then_reopen_keeps_data(db_path: Path) -> None:
    s = EventStore(str(db_path))
    await s.open()
    await s.append([deltas("s", 0, 3)])
    await s.close()
    s2 = EventStore(str(db_path))
    await s2.open()
    try:
        assert [e.seq for e in await s2.read("s")] == [0, 1, 2]
    finally:
        await s2.close()


async def test_open_file_that_is_not_a_database_raises_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database, just text\n" * 200)
    s = EventStore(str(path))
    with pytest.raises(StoreError) as info:
        await s.open()
    await s.close()
    assert type(info.value) is StoreError
    assert str(path) in info.value.message
    assert "not a database" in info.value.message


async def test_open_unopenable_path_raises_store_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_text("x")
    for path in (not_a_dir / "omni.db", tmp_path):  # a parent that is a file; a directory
        s = EventStore(str(path))
        with pytest.raises(StoreError) as info:
            await s.open()
        await s.close()
        assert type(info.value) is StoreError
        assert "cannot open database" in info.value.message


async def test_unmigrated_database_gives_store_error_on_read_and_append(tmp_path: Path) -> None:
    s = EventStore(str(tmp_path / "bare.db"))
    await s.open()
    try:
        with pytest.raises(StoreError) as read_err:
            await s.read("s")
        assert "no such table" in read_err.value.message
        with pytest.raises(StoreError) as append_err:
            await s.append([deltas("s", 0, 1)])
        assert not isinstance(append_err.value, SeqConflict)
        assert append_err.value.status == 500
        for call in (s.last("s"), s.next_seq("s"), s.by_type("t"), s.purge(["s"])):
            with pytest.raises(StoreError):
                await call
    finally:
        await s.close()


async def test_database_replaced_by_garbage_gives_store_error(tmp_path: Path) -> None:
    # The file is corrupted between open and use: the driver's error is translated.
    from omni.db import upgrade

    path = tmp_path / "omni.db"
    upgrade(str(path))
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(b"garbage " * 1000)
    s = EventStore(str(path))
    with pytest.raises(StoreError):
        await s.open()
    await s.close()


async def test_a_cancelled_append_leaves_the_store_writable(store: EventStore) -> None:
    """A caller cancelled at any point of an append on the writer's thread (one queued behind
    another write: a direct one has no await to be cancelled at): the next append still
    commits, and what was committed is all there, in order."""
    seq = 0
    for ticks in range(8):  # cancelled at each point of the transaction in turn
        ahead = asyncio.ensure_future(store.purge(["nothing"]))
        task = asyncio.create_task(store.append([deltas("s", seq, 2)]))
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, StoreError):
            pass
        await ahead
        await asyncio.sleep(0.05)
        seq = len(raw_rows(store.path, "s"))
        stored = await store.append([deltas("s", seq, 1)])
        assert [e.seq for e in stored] == [seq]
        seq += 1
    assert [r[2] for r in raw_rows(store.path, "s")] == list(range(seq))


async def test_a_cancelled_callers_commit_is_remembered(store: EventStore) -> None:
    """Once handed to the writer an append runs to the end even if its caller is cancelled, and
    the store's memory of recent rows learns it (a stream's next seq must stay right)."""
    # A write queued on the writer's thread first: the append queues behind it (it may not
    # commit directly on the loop, ahead of it).
    purge = asyncio.ensure_future(store.purge(["nothing"]))
    task = asyncio.create_task(store.append([deltas("s", 0, 3)]))
    await asyncio.sleep(0)  # submitted to the writer's thread, not yet committed
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await purge
    await store.append([deltas("other", 0, 1)])  # after it: it has committed
    assert [r[2] for r in raw_rows(store.path, "s")] == [0, 1, 2]
    last = await store.last("s")
    assert last is not None and last.seq == 2
    assert [e.seq for e in await store.read("s")] == [0, 1, 2]


async def test_close_commits_the_writes_already_handed_over(db_path: Path) -> None:
    store = EventStore(str(db_path))
    await store.open()
    queued = asyncio.ensure_future(store.purge(["nothing"]))  # appends queue behind it
    pending = [asyncio.ensure_future(store.append([deltas(f"s{i}", 0, 2)])) for i in range(20)]
    await asyncio.sleep(0)
    assert store._queued == 21  # all on the writer's thread
    await store.close()
    await asyncio.gather(queued, *pending)
    assert len(raw_rows(db_path)) == 40


async def test_appends_wait_behind_a_long_cache_rebuild_and_all_commit(store: EventStore) -> None:
    """Writes share one queue (an append goes direct only when it is empty): a long rebuild of
    the replay-cache index delays appends but never makes them fail on SQLite's busy timeout."""
    chats = [a for i in range(20_000) for a in finished_chat(f"chatcmpl-{i}", f"key{i}")]
    with sqlite3.connect(store.path) as conn:
        conn.executemany(
            "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?,?,?,?,?)",
            [
                (a.stream_id, a.first_seq + n, e.type, e.data, int(time.time() * 1000))
                for a in chats
                for n, e in enumerate(a.events)
            ],
        )
    conn.close()
    store.cache_max_entries = 200_000
    rebuild = asyncio.ensure_future(store.cache.rebuild())
    appends = [asyncio.ensure_future(store.append([deltas("s", i, 1)])) for i in range(30)]
    await asyncio.gather(rebuild, *appends)
    assert [r[2] for r in raw_rows(store.path, "s")] == list(range(30))
    assert rebuild.result() == await store.cache.size() == 20_000


def test_a_process_that_never_closes_its_store_still_exits(db_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from omni.events import EventStore\n"
        "async def main():\n"
        "    store = EventStore(sys.argv[1])\n"
        "    await store.open()\n"
        "    await store.pragmas()\n"
        "    raise SystemExit(3)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(db_path)], timeout=60)
    assert done.returncode == 3


async def test_a_purge_behind_a_queued_append_leaves_nothing_in_memory(store: EventStore) -> None:
    """An append queued before a purge of its stream commits first, then the purge deletes it:
    the store must not answer from memory with rows the table no longer has."""
    await store.append([deltas("x", 0, 1)])
    pending = asyncio.ensure_future(store.append([deltas("x", 1, 2)]))
    await asyncio.sleep(0)  # the append is queued on the writer before the purge
    assert await store.purge(["x"]) == 3
    await pending
    assert raw_rows(store.path, "x") == []
    assert await store.read("x") == []
    assert await store.last("x") is None
    await store.append([deltas("x", 0, 1)])  # the stream can start again
    assert [e.seq for e in await store.read("x")] == [0]


async def test_a_cancelled_open_leaves_no_writer_thread(db_path: Path) -> None:
    def writers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("omni-writer")]

    before = writers()
    store = EventStore(str(db_path))
    task = asyncio.ensure_future(store.open())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if writers() == before:
            break
        await asyncio.sleep(0.02)
    assert writers() == before
    with pytest.raises(StoreError):
        await store.read("s")


# --- direct appends: committed on the event loop when nothing waits on the writer's thread --


async def test_an_append_waiting_for_another_process_does_not_block_the_loop(
    store: EventStore, db_path: Path
) -> None:
    """Busy, the loop's connection gives way at once (no busy wait there): the append waits on
    the writer's thread, and the loop goes on meanwhile."""
    other = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        task = asyncio.create_task(store.append([deltas("s", 0, 1)]))
        start = time.perf_counter()
        for _ in range(10):
            await asyncio.sleep(0.01)
        assert time.perf_counter() - start < 1.0  # not held up by a 5 s busy timeout
        assert not task.done() and store._queued == 1
        other.execute("COMMIT")
        await asyncio.wait_for(task, 3)
    finally:
        other.close()
    assert [e.seq for e in await store.append([deltas("s", 1, 1)])] == [1]  # direct again
    assert store._queued == 0
    assert [r[2] for r in raw_rows(db_path, "s")] == [0, 1]


async def test_a_direct_append_commits_all_in_order_and_a_bigger_one_goes_to_the_thread(
    store: EventStore,
) -> None:
    from omni.events.sqlite import store as store_module

    n = store_module.DIRECT_ROWS - 3
    stored = await store.append([deltas("a", 0, n), deltas("b", 0, 3)])  # DIRECT_ROWS rows
    assert store._direct_commits == 1
    assert [e.seq for e in stored] == [*range(n), 0, 1, 2]
    positions = [e.position for e in stored]
    assert positions == sorted(positions) and len(set(positions)) == n + 3
    assert [(e.position, e.seq) for e in await store.read("a")] == [
        (e.position, e.seq) for e in stored[:n]
    ]
    # One row more would hold the loop too long: the writer's thread commits it.
    big = await store.append([deltas("c", 0, store_module.DIRECT_ROWS + 1)])
    assert store._direct_commits == 1 and len(big) == store_module.DIRECT_ROWS + 1
    assert [e.seq for e in await store.read("c")] == list(range(store_module.DIRECT_ROWS + 1))


async def test_a_direct_append_failing_mid_transaction_leaves_the_store_writable(
    store: EventStore, db_path: Path
) -> None:
    """Not only driver errors: a string SQLite cannot take fails after BEGIN. The transaction
    must end, or the loop's connection would hold the write lock for good."""
    with pytest.raises(StoreError):
        await store.append([Append("s", 0, [NewEvent("x", '{"k":"\ud800"}')])])
    assert store._direct is not None and not store._direct.in_transaction
    assert [e.seq for e in await store.append([deltas("s", 0, 2)])] == [0, 1]
    assert await asyncio.wait_for(store.purge(["s"]), 2) == 2  # the writer's thread too


async def test_the_wal_stays_bounded_under_direct_appends(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite starts the WAL over only when a write finds it wholly checkpointed: commits
    landing during a checkpoint would keep it growing. Appends wait for the checkpoint."""
    from omni.events.sqlite import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 32)
    store = EventStore(str(db_path))
    await store.open()
    try:
        for seq in range(1500):  # ~8 KB of WAL a commit: 12 MB if it never started over
            await store.append([deltas("s", seq, 1)])
        wal = Path(f"{db_path}-wal").stat().st_size
        assert wal < 4 << 20, wal
    finally:
        await store.close()


async def test_a_direct_append_is_all_or_nothing(store: EventStore, db_path: Path) -> None:
    await store.append([deltas("b", 0, 1)])
    with pytest.raises(SeqConflict):
        await store.append([deltas("a", 0, 5), deltas("b", 0, 1)])  # b's seq 0 is taken
    assert raw_rows(db_path, "a") == []
    assert [e.seq for e in await store.append([deltas("a", 0, 2)])] == [0, 1]  # still writable


async def test_direct_appends_are_checkpointed_by_the_writers_thread(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's connection never checkpoints; the writer's thread does, every so many
    commits, so the rows reach the database file itself (read here ignoring the WAL)."""
    from omni.events.sqlite import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 4)
    store = EventStore(str(db_path))
    await store.open()
    try:

        def in_file() -> int:
            uri = f"file:{db_path}?mode=ro&immutable=1"  # the main file only, not the WAL
            with sqlite3.connect(uri, uri=True) as conn:
                try:
                    return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
                except sqlite3.OperationalError:  # even the table is only in the WAL yet
                    return 0

        for seq in range(3):
            await store.append([deltas("s", seq, 1)])
        assert in_file() == 0  # three commits, all still in the WAL
        await store.append([deltas("s", 3, 1)])  # the fourth: a checkpoint is handed over
        await store._write(lambda conn: None)  # the writer's thread has run it
        assert in_file() == 4
    finally:
        await store.close()


async def test_with_synchronous_full_every_append_goes_through_the_writers_thread(
    db_path: Path,
) -> None:
    """A commit that waits for the disk never runs on the event loop."""
    store = EventStore(str(db_path), synchronous="FULL")
    await store.open()
    try:
        assert store._direct is None
        assert [e.seq for e in await store.append([deltas("s", 0, 2)])] == [0, 1]
        assert (await store.pragmas())["synchronous"] == "FULL"
    finally:
        await store.close()


# --- the replay-cache index: upkeep in the append's transaction, on either path -------------


async def test_a_finishing_append_indexes_the_cache_on_the_loop_within_its_bound(
    db_path: Path,
) -> None:
    """A completion's last append indexes it in the replay cache (the database's trigger): it
    commits directly like any other (handed to the writer's thread it waited ~1 ms for the
    thread and the old trim, and 8 completions ending in one step queued behind one another),
    and the index keeps the newest entries only, the latest insert winning a tie on the
    millisecond."""
    store = EventStore(str(db_path), cache_max_entries=3)
    await store.open()
    try:
        for i in range(5):
            await store.append(finished_chat(f"c{i}", f"k{i}"))
        assert store._direct_commits == 5 and store._queued == 0
        assert await store.cache.size() == 3
        assert [await store.cache.lookup(f"k{i}") for i in range(5)] == [
            None,
            None,
            "c2",
            "c3",
            "c4",
        ]
        # A key answered again is answered by its newest completion.
        await store.append(finished_chat("c5", "k2"))
        assert await store.cache.size() == 3
        assert [await store.cache.lookup(k) for k in ("k2", "k3", "k4")] == ["c5", "c3", "c4"]
    finally:
        await store.close()


async def test_the_cache_row_and_the_events_commit_together_or_not_at_all(
    store: EventStore, db_path: Path
) -> None:
    await store.append([deltas("c", 0, 1)])
    with pytest.raises(SeqConflict):  # seq 0 of c is taken: nothing of this append commits
        await store.append(finished_chat("c", "k"))
    assert await store.cache.lookup("k") is None
    assert len(raw_rows(db_path, "c")) == 1


async def test_an_entry_past_its_age_leaves_the_index_on_the_next_append(
    db_path: Path,
) -> None:
    store = EventStore(str(db_path), cache_max_age_s=60)
    await store.open()
    try:
        old = int(time.time() * 1000) - 61_000
        await store.append(finished_chat("a", "old"))
        with sqlite3.connect(str(db_path)) as conn:  # as if indexed 61 s ago
            conn.execute("UPDATE chat_cache SET created_at = ?", (old,))
        conn.close()
        assert await store.cache.size() == 1
        assert await store.cache.lookup("old") is None  # never answered meanwhile
        await store.append(finished_chat("b", "new"))
        assert [await store.cache.lookup(k) for k in ("old", "new")] == [None, "b"]
        assert await store.cache.size() == 1
    finally:
        await store.close()


async def test_a_cache_bound_too_big_to_trim_on_the_loop_is_kept_up_on_the_thread(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omni.events.sqlite import store as store_module

    monkeypatch.setattr(store_module, "DIRECT_CACHE_ENTRIES", 2)
    store = EventStore(str(db_path), cache_max_entries=3)
    await store.open()
    handed: list[str] = []
    hand_over = store._hand_over
    monkeypatch.setattr(store, "_hand_over", lambda *a: handed.append(a[1]) or hand_over(*a))
    try:
        for i in range(5):
            await store.append(finished_chat(f"c{i}", f"k{i}"))
            await store.pragmas()  # a write queued behind any trim: the next append is direct
        assert store._direct_commits == 5  # committed on the loop, trimmed on the thread
        assert handed == ["cache upkeep"] * 5
        assert await store.cache.size() == 3
        assert [await store.cache.lookup(f"k{i}") for i in (1, 2, 4)] == [None, "c2", "c4"]
    finally:
        await store.close()


async def test_a_bound_lowered_since_the_last_start_is_applied_at_open_not_on_the_loop(
    db_path: Path,
) -> None:
    """Thousands of index rows over the bound (or past their age) are deleted by open() on the
    writer's thread; an append's own upkeep deletes a few at most, so it never holds the event
    loop for a mass delete."""
    from omni.events.sqlite import store as store_module

    now = int(time.time() * 1000)
    with sqlite3.connect(str(db_path)) as conn:
        rows = [(f"k{i}", f"c{i}", now - 1000 + i // 10) for i in range(5000)]
        rows += [(f"old{i}", f"x{i}", now - 10**9) for i in range(3000)]  # past the age below
        conn.executemany("INSERT INTO chat_cache VALUES (?,?,?)", rows)
    conn.close()
    store = EventStore(str(db_path), cache_max_entries=100, cache_max_age_s=3600)
    await store.open()
    try:
        assert await store.cache.size() == 100
        assert await store.cache.lookup("k4999") == "c4999"
        store.cache_max_entries = 10  # lowered at run time: the appends trim a few at a time
        for i in range(2):
            await store.append(finished_chat(f"a{i}", f"n{i}"))
        assert store._direct_commits == 2
        assert await store.cache.size() == 10
        with sqlite3.connect(str(db_path)) as conn:
            conn.executemany("INSERT INTO chat_cache VALUES (?,?,?)", rows[5000:])
        conn.close()
        await store.append(finished_chat("b", "nb"))
        left = await store.cache.size()
        # b's row in; at most CACHE_UPKEEP_ROWS expired and as many over the bound out: the
        # rest goes with the next appends.
        assert left == 10 + 1 + 3000 - 2 * store_module.CACHE_UPKEEP_ROWS
        assert await store.cache.lookup("old0") is None  # and are never answered meanwhile
    finally:
        await store.close()


async def test_an_append_failing_on_the_writers_thread_is_a_store_error(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's thread fails the same way as the loop's connection: a StoreError (the
    recorder's contract), not whatever the driver raised, and the store stays writable."""
    from omni.events.sqlite import store as store_module

    monkeypatch.setattr(store_module, "DIRECT_ROWS", 0)  # every append goes to the thread
    with pytest.raises(StoreError):
        await store.append([Append("s", 0, [NewEvent("x", '{"k":"\ud800"}')])])
    assert [e.seq for e in await store.append([deltas("s", 0, 2)])] == [0, 1]
    assert store._direct_commits == 0


async def test_a_cache_lookup_reads_on_the_loops_connection(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup by key runs on the loop's own connection (the reader's thread cost ~1 ms of
    the loop a request, and a burst's lookups queued there); it sees what the writer's thread
    committed, and the reader answers when that connection cannot."""
    from omni.events.sqlite import store as store_module

    monkeypatch.setattr(store_module, "DIRECT_ROWS", 0)  # indexed on the writer's thread
    await store.append(finished_chat("c", "k"))
    fetched: list[object] = []
    fetch = store._fetch

    async def counted(query: object) -> list[object]:
        fetched.append(query)
        return await fetch(query)

    monkeypatch.setattr(store, "_fetch", counted)
    assert [await store.cache.lookup(k) for k in ("k", "other")] == ["c", None]
    assert fetched == []

    class Busy:
        in_transaction = False

        def execute(self, *args: object) -> None:
            raise sqlite3.OperationalError("database is locked")

    direct, store._direct = store._direct, Busy()  # type: ignore[assignment]
    try:
        assert await store.cache.lookup("k") == "c"
        store._direct = None  # closed after a failed rollback
        assert await store.cache.lookup("k") == "c"
    finally:
        store._direct = direct
    assert len(fetched) == 2
