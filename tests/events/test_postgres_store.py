"""What the PostgreSQL store adds to the contract (tests/events/test_contract.py holds it to
that): positions in commit order with writers in other processes, wake-ups across processes
(LISTEN/NOTIFY), connections lost and made again, synchronous_commit from `synchronous`."""

from __future__ import annotations

import asyncio
import multiprocessing
import random

import psycopg
import pytest

from omni.errors import LeaseLost, StoreError
from omni.events import Append, Appender, Notifier
from omni.events.postgres.store import PostgresStore

from ._helpers import deltas, ev

DELTA = "response.output_text.delta"
WRITERS, APPENDS = 4, 40


def write_in_another_process(url: str, writer: int, seed: int) -> None:
    """Appends of mixed sizes by a store of this process's own (a fresh process: its own
    driver)."""

    async def run() -> None:
        store = PostgresStore(url)
        await store.open()
        rng = random.Random(seed)
        seq = 0
        try:
            for _ in range(APPENDS):
                size = rng.choice((1, 1, 3, 40))
                await store.append([Append(f"p{writer}", seq, [ev() for _ in range(size)])])
                seq += size
        finally:
            await store.close()

    asyncio.run(run())


def writers() -> multiprocessing.context.ForkServerContext:
    """Fresh processes, forked from a clean one that imported the store once (spawning each
    cost a whole interpreter's start-up and imports)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


async def test_a_reader_following_by_position_never_misses_a_row_of_other_processes(
    pg_url: str,
) -> None:
    """Writers in several processes, each on its own connection, and in-process writers on
    stores of their own, while a reader asks for `position > last_seen` over and over: at the
    end it has seen every row of the table, once, in position order."""
    reader = PostgresStore(pg_url)
    local = [PostgresStore(pg_url) for _ in range(2)]
    for store in (reader, *local):
        await store.open()
    fresh = writers()
    procs = [
        fresh.Process(target=write_in_another_process, args=(pg_url, w, w)) for w in range(WRITERS)
    ]
    seen: list[int] = []
    done = asyncio.Event()

    async def follow() -> None:
        while True:
            finished = done.is_set()  # one more read after the last commit
            rows = await reader.by_type(DELTA, seen[-1] if seen else 0)
            seen.extend(e.position for e in rows)
            if finished:
                return
            await asyncio.sleep(0)

    async def write_here(n: int) -> None:
        seq = 0
        for _ in range(APPENDS):
            await local[n].append([deltas(f"l{n}", seq, 2)])
            seq += 2

    try:
        following = asyncio.create_task(follow())
        for p in procs:
            p.start()
        await asyncio.gather(*(write_here(n) for n in range(len(local))))
        while any(p.is_alive() for p in procs):
            await asyncio.sleep(0.02)
        assert [p.exitcode for p in procs] == [0] * WRITERS
        done.set()
        await following
        with psycopg.connect(pg_url) as conn:
            table = [p for (p,) in conn.execute("SELECT position FROM events ORDER BY position")]
        assert len(table) > WRITERS * APPENDS + len(local) * APPENDS * 2
        assert seen == table
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for store in (reader, *local):
            await store.close()


async def test_a_commit_in_another_process_wakes_this_ones_followers(pg_url: str) -> None:
    notifier = Notifier()
    here = PostgresStore(pg_url, notifier=notifier)
    there = PostgresStore(pg_url)  # another writer: its own connections, no notifier
    await here.open()
    await there.open()
    try:
        with notifier.subscribe("resp_x") as wake, notifier.subscribe("resp_y") as other:
            await there.append([deltas("resp_x", 0, 2)])
            async with asyncio.timeout(10):
                await wake.wait()
            assert not other.is_set()  # only the streams appended to
            wake.clear()
            await here.append([deltas("resp_x", 2, 1)])  # this process's own: not echoed
            await there.append([deltas("resp_y", 0, 1)])  # (committed after ours)
            async with asyncio.timeout(10):
                await other.wait()
            assert not wake.is_set()
    finally:
        await here.close()
        await there.close()


async def test_a_lost_listen_connection_comes_back_and_wakes_every_follower(pg_url: str) -> None:
    notifier = Notifier()
    here = PostgresStore(pg_url, notifier=notifier)
    there = PostgresStore(pg_url)
    await here.open()
    await there.open()
    try:
        listener = here._listener
        assert listener is not None and listener.listening.is_set()
        with notifier.subscribe("resp_x") as wake:
            _terminate(pg_url, "LISTEN omni_events")
            async with asyncio.timeout(20):
                await wake.wait()  # woken once it listens again: it may have missed some
            async with asyncio.timeout(20):
                await listener.listening.wait()
            wake.clear()
            await there.append([deltas("resp_x", 0, 1)])
            async with asyncio.timeout(10):
                await wake.wait()
    finally:
        await here.close()
        await there.close()


async def test_a_lost_writer_connection_fails_one_append_and_the_next_connects_again(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.append([deltas("s", 0, 1)])
        pid = store._writer_pid()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError):
            await store.append([deltas("s", 1, 1)])
        stored = await store.append([deltas("s", 1, 1)])
        assert [e.seq for e in stored] == [1] and store._writer_pid() != pid
        assert [e.seq for e in await store.read("s")] == [0, 1]
    finally:
        await store.close()


@pytest.mark.parametrize(("synchronous", "expected"), [("NORMAL", "off"), ("FULL", "on")])
async def test_synchronous_sets_the_writers_synchronous_commit(
    pg_url: str, synchronous: str, expected: str
) -> None:
    store = PostgresStore(pg_url, synchronous=synchronous)
    await store.open()
    try:
        (row,) = await store.fetch_sql(
            "SELECT setting FROM pg_settings WHERE name = 'synchronous_commit'", ()
        )
        assert row[0] == "on"  # the readers' sessions keep the server's own
        writer = store._writer
        assert writer is not None
        cursor = await writer.execute("SHOW synchronous_commit")
        assert (await cursor.fetchone())[0] == expected
        await writer.rollback()
    finally:
        await store.close()


async def test_an_unreachable_database_is_one_store_error() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(StoreError, match="cannot open database|failed"):
        await store.open()


def _terminate(url: str, query: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        (n,) = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            (query,),
        ).fetchone()  # type: ignore[misc]
    assert n == 1


async def test_a_replica_may_not_append_to_a_stream_another_replica_leases(pg_url: str) -> None:
    """A lease that lapsed while its owner still ran the work, and another replica took over:
    the old owner's appends to that stream are refused whole; its other streams commit."""
    store = PostgresStore(pg_url)
    await store.open()
    store.replica = "a"
    appender = Appender(store, Notifier())
    appender.start()
    try:
        assert await store.leases.claim(["mine", "theirs"], "a", 60_000) == ["mine", "theirs"]
        await store.append([deltas("mine", 0, 1), deltas("theirs", 0, 1)])
        assert await store.leases.claim(["theirs"], "b", 60_000) == []  # a's while it lasts
        await store.leases.claim(["theirs"], "a", -1)  # a's lease lapses
        assert await store.leases.claim(["theirs"], "b", 60_000) == ["theirs"]

        with pytest.raises(LeaseLost):
            await store.append([deltas("mine", 1, 1), deltas("theirs", 1, 1)])
        assert [e.seq for e in await store.read("mine")] == [0]  # nothing of it was written

        # Queued together, the appends commit apart: a's own stream, and the unleased one.
        refused = appender.submit(deltas("theirs", 1, 1))
        mine = appender.submit(deltas("mine", 1, 1))
        unleased = appender.submit(deltas("free", 0, 1))
        later = appender.submit(deltas("theirs", 2, 1))
        with pytest.raises(LeaseLost):
            await refused
        assert [e.seq for e in await mine] == [1] and [e.seq for e in await unleased] == [0]
        with pytest.raises(StoreError):  # after a refused one: no gap left to fill
            await later
        assert [e.seq for e in await store.read("theirs")] == [0]
    finally:
        await appender.stop()
        await store.close()


async def test_settle_waits_for_an_append_another_server_has_under_way(pg_url: str) -> None:
    """A takeover's barrier: an old owner's append that began before the claim (it holds the
    log's lock until it commits) is in the log before the new owner reads the stream."""
    from omni.events.postgres.connections import LOG_LOCK

    store = PostgresStore(pg_url)
    await store.open()
    try:
        with psycopg.connect(pg_url) as other:  # the old owner, mid-append
            other.execute(f"SELECT pg_advisory_xact_lock({LOG_LOCK})")
            other.execute(
                "INSERT INTO events (stream_id, seq, type, data, created_at)"
                " VALUES ('resp_old', 0, 'response.created', '{}', 0)"
            )
            settling = asyncio.ensure_future(store.leases.settle())
            await asyncio.sleep(0.3)
            assert not settling.done()  # it cannot pass while that append is under way
            other.commit()
        await asyncio.wait_for(settling, 30)
        assert [e.seq for e in await store.read("resp_old")] == [0]
    finally:
        await store.close()
