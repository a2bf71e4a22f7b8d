"""The store's contract (omni/events/contract.py), held against every backend: SQLite on a real
file, memory, a real PostgreSQL. A backend joins by adding itself to `make` below."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from omni.errors import SeqConflict, StoreError
from omni.events import Append, EventStore, MemoryStore, NewEvent, Store
from omni.events.postgres.store import PostgresStore

from ._helpers import ACCEPTED, deltas, ev, finished_chat, finished_message

TOMBSTONE = "omni.completion.deleted"


Make = Callable[..., Store]  # a store of this backend, given the cache's bounds


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def make(request: pytest.FixtureRequest, db_path: Path) -> Make:
    if request.param == "sqlite":
        return lambda **bounds: EventStore(str(db_path), **bounds)
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        return lambda **bounds: PostgresStore(url, **bounds)
    return MemoryStore


@pytest.fixture
async def backend(make: Make) -> AsyncIterator[Store]:
    store = make()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def everything(store: Store, *streams: str) -> list[tuple[str, int, str]]:
    return [(e.stream_id, e.seq, e.data) for s in streams for e in await store.read(s)]


def accepted(*item_ids: str, **fields: object) -> NewEvent:
    items = [{"id": i, "type": "message"} for i in item_ids]
    return NewEvent(ACCEPTED, json.dumps({"kind": "response", "input": items, **fields}))


def item_done(item_id: str) -> NewEvent:
    return NewEvent("response.output_item.done", json.dumps({"item": {"id": item_id}}))


# --- append, read, last, next_seq ------------------------------------------------------------


async def test_an_append_reads_back_in_seq_order_with_its_values(backend: Store) -> None:
    events = [ev("response.created", n=0), ev(n=1), ev("response.completed", n=2)]
    lo = int(time.time() * 1000)
    stored = await backend.append([Append("resp_1", 0, events)])
    hi = int(time.time() * 1000)
    assert [(e.stream_id, e.seq, e.type, e.data) for e in stored] == [
        ("resp_1", i, n.type, n.data) for i, n in enumerate(events)
    ]
    assert await backend.read("resp_1") == stored
    assert all(lo <= e.created_at <= hi for e in stored)


async def test_data_comes_back_byte_for_byte(backend: Store) -> None:
    samples = ['{"delta":"héllo 日本語 🎉"}', '{"a": 1,   "b" :[ ]}\n', "", "x" * 100_000]
    await backend.append([Append("s", 0, [NewEvent("t", d) for d in samples])])
    assert [e.data for e in await backend.read("s")] == samples


async def test_read_orders_by_seq_after_and_limit(backend: Store) -> None:
    await backend.append([deltas("s", 5, 5), deltas("s", 0, 5)])  # later seqs listed first
    assert [e.seq for e in await backend.read("s")] == list(range(10))
    assert [e.seq for e in await backend.read("s", after=4)] == [5, 6, 7, 8, 9]
    assert [e.seq for e in await backend.read("s", after=6, limit=2)] == [7, 8]
    assert await backend.read("s", limit=0) == []
    assert await backend.read("s", after=9) == []
    assert await backend.read("nope") == []


async def test_last_and_next_seq(backend: Store) -> None:
    assert await backend.last("s") is None
    assert await backend.next_seq("s") == 0
    await backend.append([deltas("s", 0, 3)])
    last = await backend.last("s")
    assert last is not None and (last.stream_id, last.seq) == ("s", 2)
    assert await backend.next_seq("s") == 3
    assert await backend.next_seq("t") == 0


async def test_one_append_of_several_streams_is_one_commit(backend: Store) -> None:
    stored = await backend.append(
        [
            Append("resp_A/request", 0, [ev(ACCEPTED)]),
            Append("resp_A", 0, [ev("response.created"), ev("response.in_progress")]),
            Append("resp_B", 0, [ev("response.created")]),
        ]
    )
    assert [(e.stream_id, e.seq) for e in stored] == [
        ("resp_A/request", 0),
        ("resp_A", 0),
        ("resp_A", 1),
        ("resp_B", 0),
    ]
    assert len({e.created_at for e in stored}) == 1
    assert [e.position for e in stored] == list(range(stored[0].position, stored[0].position + 4))


async def test_an_empty_append_writes_nothing(backend: Store) -> None:
    assert await backend.append([]) == []
    assert await backend.append([Append("s", 0, [])]) == []
    assert await backend.next_seq("s") == 0


async def test_a_taken_seq_is_a_conflict_and_nothing_of_the_append_is_written(
    backend: Store,
) -> None:
    await backend.append([deltas("s", 0, 2)])
    before = await everything(backend, "s", "t")
    with pytest.raises(SeqConflict):
        await backend.append([deltas("t", 0, 3), deltas("s", 1, 2)])
    with pytest.raises(SeqConflict):  # twice in one append
        await backend.append([deltas("u", 0, 2), deltas("u", 1, 1)])
    assert await everything(backend, "s", "t", "u") == before
    assert [e.seq for e in await backend.append([deltas("s", 2, 1)])] == [2]  # still writable


async def test_what_cannot_be_stored_is_a_store_error_and_nothing_is_written(
    backend: Store,
) -> None:
    with pytest.raises(StoreError) as info:
        await backend.append([deltas("t", 0, 1), Append("s", 0, [NewEvent("x", '"\ud800"')])])
    assert not isinstance(info.value, SeqConflict)
    assert await everything(backend, "s", "t") == []


async def test_positions_grow_in_commit_order_and_are_never_reused(backend: Store) -> None:
    first = await backend.append([deltas("a", 0, 2)])
    second = await backend.append([deltas("b", 0, 1), deltas("a", 2, 1)])
    assert [e.position for e in first + second] == sorted(e.position for e in first + second)
    assert await backend.purge(["a", "b"]) == 4
    again = await backend.append([deltas("a", 0, 1)])
    assert again[0].position > second[-1].position


# --- finding ---------------------------------------------------------------------------------


async def test_by_type_in_log_order_after_a_position(backend: Store) -> None:
    await backend.append([Append("r1/request", 0, [ev(ACCEPTED, n=1)])])
    await backend.append([deltas("r1", 0, 3)])
    await backend.append([Append("r2/request", 0, [ev(ACCEPTED, n=2)])])
    await backend.append([Append("r1/request", 1, [ev("omni.request.cancel")])])
    found = await backend.by_type(ACCEPTED)
    assert [e.stream_id for e in found] == ["r1/request", "r2/request"]
    later = await backend.by_type(ACCEPTED, after_position=found[0].position)
    assert [e.stream_id for e in later] == ["r2/request"]
    assert await backend.by_type("no.such.type") == []


async def test_unfinished_streams_began_with_a_type_and_hold_no_end(backend: Store) -> None:
    await backend.append([Append("r1", 0, [ev("response.created"), ev("response.completed")])])
    await backend.append([Append("r2", 0, [ev("response.created"), ev("response.in_progress")])])
    await backend.append([Append("r3", 0, [ev("response.in_progress")])])
    await backend.append([Append("r4", 0, [ev("x"), ev("response.created")])])  # not at seq 0
    await backend.append([Append("r5", 0, [ev("response.created")])])
    await backend.append([Append("r2/request", 0, [ev("response.completed")])])  # another stream
    ends = ["response.completed", "response.failed"]
    assert await backend.unfinished("response.created", ends) == ["r2", "r5"]
    assert await backend.unfinished("response.created", []) == ["r1", "r2", "r5"]


async def test_streams_with_a_fact_in_their_data(backend: Store) -> None:
    for sid, body in (
        ("a", {"kind": "chat", "body": {"store": False}}),
        ("b", {"kind": "chat", "body": {"store": True}}),
        ("c", {"kind": "text", "body": {}}),
        ("d", {"kind": "chat", "body": {"store": 0}}),  # 0 reads as false
        ("e", {"kind": "chat", "body": {"store": "false"}}),  # a string is no boolean
        ("f", {"kind": "chat"}),
    ):
        await backend.append([Append(f"{sid}/request", 0, [NewEvent(ACCEPTED, json.dumps(body))])])
    await backend.append([Append("g/request", 0, [NewEvent("other", '{"kind": "text"}')])])
    unstored = (("$.body.store", False), ("$.kind", "text"))
    assert await backend.streams_with(ACCEPTED, unstored) == ["a/request", "c/request", "d/request"]
    assert await backend.streams_with(ACCEPTED, [("$.body.store", True)]) == ["b/request"]
    assert await backend.streams_with(ACCEPTED, []) == []


async def test_item_holders_are_indexed_in_their_append_and_purged_with_it(
    backend: Store,
) -> None:
    await backend.append(
        [Append("resp_a/request", 0, [accepted("msg_in", "fc_in")]), Append("resp_a", 0, [])]
    )
    await backend.append([Append("resp_a", 0, [ev("response.created"), item_done("msg_out")])])
    await backend.append([Append("resp_b/request", 0, [accepted("msg_out", "msg_b")])])
    assert await backend.item_holders("msg_in") == ["resp_a"]
    assert await backend.item_holders("msg_out") == ["resp_a", "resp_b"]  # the first first
    assert await backend.item_holders("nope") == []
    await backend.purge(["resp_a", "resp_a/request"])
    assert await backend.item_holders("msg_out") == ["resp_b"]
    assert await backend.item_holders("msg_in") == []


# --- purging ---------------------------------------------------------------------------------


async def test_purge_removes_whole_streams_only(backend: Store) -> None:
    await backend.append(
        [deltas("resp_a", 0, 3), deltas("resp_a/request", 0, 1), deltas("resp_ab", 0, 2)]
    )
    assert await backend.purge(["resp_a", "missing"]) == 3
    assert await backend.read("resp_a") == []
    assert await backend.last("resp_a") is None
    assert len(await backend.read("resp_a/request")) == 1
    assert len(await backend.read("resp_ab")) == 2
    assert await backend.purge([]) == 0


async def test_purge_objects_removes_each_object_with_its_internal_streams(
    backend: Store,
) -> None:
    await backend.append(
        [
            deltas("resp_a", 0, 2),
            deltas("resp_a/request", 0, 1),
            deltas("resp_a/tokens", 0, 1),
            deltas("resp_b", 0, 1),
        ]
    )
    assert await backend.purge_objects(["resp_a"]) == 4
    assert await everything(backend, "resp_a", "resp_a/request", "resp_a/tokens") == []
    assert len(await backend.read("resp_b")) == 1


# --- the replay-cache index ------------------------------------------------------------------


async def test_a_finished_stored_completion_is_indexed_by_its_key(backend: Store) -> None:
    await backend.append(finished_chat("chatcmpl-a", "k1"))
    await backend.append(finished_chat("chatcmpl-b", "k2", store=False))
    await backend.append(finished_chat("chatcmpl-c", "k3", mirror_of="chatcmpl-a"))
    await backend.append(finished_chat("chatcmpl-d", None))
    request, _ = finished_chat("chatcmpl-e", "k4")  # still running: no usage chunk
    await backend.append([request, Append("chatcmpl-e", 0, [ev("chat.completion.chunk")])])
    assert [await backend.cache.lookup(k) for k in ("k1", "k2", "k3", "k4")] == [
        "chatcmpl-a",
        None,
        None,
        None,
    ]
    assert await backend.cache.size() == 1


async def test_a_finished_stored_message_is_indexed_by_its_key(backend: Store) -> None:
    """A message (Anthropic's API) ends with message_stop: indexed by the chat's rules, and its
    purge takes its entry along."""
    await backend.append(finished_message("msg_a", "m1"))
    await backend.append(finished_message("msg_b", "m2", store=False))
    await backend.append(finished_message("msg_c", "m3", mirror_of="msg_a"))
    request, _ = finished_message("msg_d", "m4")  # still running: no message_stop
    await backend.append([request, Append("msg_d", 0, [ev("message_start")])])
    await backend.append(finished_chat("chatcmpl-e", "m1"))  # newer, for the same key
    assert [await backend.cache.lookup(k) for k in ("m2", "m3", "m4")] == [None] * 3
    assert await backend.cache.lookup("m1") == "chatcmpl-e"
    await backend.purge_objects(["chatcmpl-e"])
    assert await backend.cache.lookup("m1") == "msg_a"
    assert await backend.cache.rebuild() == 1
    assert await backend.cache.lookup("m1") == "msg_a"
    await backend.purge_objects(["msg_a"])
    assert await backend.cache.lookup("m1") is None
    assert await backend.cache.size() == 0


async def test_the_newest_answer_wins_and_a_tombstone_or_purge_removes_it(backend: Store) -> None:
    for cid in ("chatcmpl-a", "chatcmpl-b", "chatcmpl-c"):
        await backend.append(finished_chat(cid, "k"))
    assert await backend.cache.lookup("k") == "chatcmpl-c"
    await backend.append([Append("chatcmpl-c/request", 1, [ev(TOMBSTONE)])])
    assert await backend.cache.lookup("k") == "chatcmpl-b"
    await backend.purge(["chatcmpl-b/request"])  # its request gone: no longer replayable
    assert await backend.cache.lookup("k") == "chatcmpl-a"
    await backend.purge_objects(["chatcmpl-a"])
    assert await backend.cache.lookup("k") is None
    assert await backend.cache.size() == 0


async def test_a_completion_deleted_while_it_ran_is_never_indexed(backend: Store) -> None:
    request, stream = finished_chat("chatcmpl-a", "k")
    await backend.append([request, Append("chatcmpl-a/request", 1, [ev(TOMBSTONE)])])
    await backend.append([stream])
    assert await backend.cache.lookup("k") is None


async def test_a_rebuild_makes_the_index_the_appends_kept(backend: Store) -> None:
    await backend.append(finished_chat("chatcmpl-a", "k1"))
    await backend.append(finished_chat("chatcmpl-b", "k2"))
    await backend.append(finished_chat("chatcmpl-c", "k1"))
    await backend.append(finished_chat("chatcmpl-d", "k3"))
    await backend.append([Append("chatcmpl-d/request", 1, [ev(TOMBSTONE)])])
    kept = [await backend.cache.lookup(k) for k in ("k1", "k2", "k3")]
    assert await backend.cache.rebuild() == 3
    assert [await backend.cache.lookup(k) for k in ("k1", "k2", "k3")] == kept
    await backend.append([Append("chatcmpl-c/request", 1, [ev(TOMBSTONE)])])
    assert await backend.cache.lookup("k1") == "chatcmpl-a"


async def test_the_index_keeps_its_newest_entries_within_its_bounds(make: Make) -> None:
    store = make(cache_max_entries=2)
    await store.open()
    try:
        for i in range(4):
            await store.append(finished_chat(f"chatcmpl-{i}", f"k{i}"))
        assert await store.cache.size() == 2
        assert [await store.cache.lookup(f"k{i}") for i in range(4)] == [
            None,
            None,
            "chatcmpl-2",
            "chatcmpl-3",
        ]
    finally:
        await store.close()
    aged = make(cache_max_age_s=0.05)
    await aged.open()
    try:
        await aged.append(finished_chat("chatcmpl-old", "old"))
        await asyncio.sleep(0.1)
        assert await aged.cache.lookup("old") is None  # past its age: never answered
        await aged.append(finished_chat("chatcmpl-new", "new"))
        assert await aged.cache.size() == 1  # the old one left with the next append
    finally:
        await aged.close()


# --- races -----------------------------------------------------------------------------------


async def test_of_appends_racing_for_one_seq_exactly_one_wins(backend: Store) -> None:
    async def claim(writer: int) -> int | None:
        try:
            await backend.append([Append("s", 0, [ev(writer=writer)])])
        except SeqConflict:
            return None
        return writer

    won = [w for w in await asyncio.gather(*(claim(w) for w in range(16))) if w is not None]
    assert len(won) == 1
    assert [json.loads(e.data)["writer"] for e in await backend.read("s")] == won


async def test_writers_appending_at_next_seq_leave_one_contiguous_stream(backend: Store) -> None:
    async def write(writer: int) -> None:
        for _ in range(10):
            while True:
                seq = await backend.next_seq("s")
                try:
                    await backend.append([Append("s", seq, [ev(writer=writer)])])
                    break
                except SeqConflict:
                    await asyncio.sleep(0)

    await asyncio.gather(*(write(w) for w in range(8)))
    assert [e.seq for e in await backend.read("s")] == list(range(80))


async def test_a_reader_following_by_position_never_skips_a_row(backend: Store) -> None:
    """Appends of many sizes from many writers (on SQLite, big ones take the writer's thread
    while small ones commit on the loop) while a reader asks for what is past the last
    position it saw: it sees every row, once, in position order."""
    done = asyncio.Event()
    seen: list[int] = []
    rng = random.Random(7)
    sizes = [[rng.choice((1, 3, 64, 1100)) for _ in range(6)] for _ in range(6)]

    async def write(writer: int) -> None:
        seq = 0
        for size in sizes[writer]:
            await backend.append([Append(f"w{writer}", seq, [ev() for _ in range(size)])])
            seq += size
            await asyncio.sleep(0)

    async def read() -> None:
        while True:
            finished = done.is_set()  # one more read after the last commit
            rows = await backend.by_type("response.output_text.delta", seen[-1] if seen else 0)
            seen.extend(e.position for e in rows)
            if finished:
                return
            await asyncio.sleep(0)

    reader = asyncio.create_task(read())
    await asyncio.gather(*(write(w) for w in range(6)))
    done.set()
    await reader
    every = [e.position for e in await backend.by_type("response.output_text.delta")]
    assert len(every) == sum(map(sum, sizes))
    assert seen == every


# --- leases ---------------------------------------------------------------------------------


async def test_a_lease_goes_to_the_first_claimant_until_it_expires(backend: Store) -> None:
    leases = backend.leases
    assert await leases.claim(["resp_1", "resp_2"], "a", 60_000) == ["resp_1", "resp_2"]
    assert await leases.claim(["resp_1", "resp_3"], "b", 60_000) == ["resp_3"]
    held = await leases.holder("resp_1")
    assert held is not None and held[0] == "a"
    assert await leases.claim(["resp_1"], "a", 60_000) == ["resp_1"]  # its owner again
    assert await leases.expired() == []
    await leases.claim(["resp_4"], "c", -1)  # expired already: its owner stopped
    assert await leases.expired() == ["resp_4"]
    assert await leases.claim(["resp_4"], "b", 60_000) == ["resp_4"]
    assert (await leases.holder("resp_4") or ("", 0))[0] == "b"
    assert await leases.expired() == []


async def test_renew_extends_only_the_owners_leases(backend: Store) -> None:
    leases = backend.leases
    await leases.claim(["x", "y"], "a", -1)
    await leases.claim(["z"], "b", -1)
    assert await leases.renew("a", 60_000) == 2
    assert await leases.expired() == ["z"]
    assert await leases.claim(["x"], "b", 60_000) == []


async def test_release_lets_go_of_the_owners_leases_alone(backend: Store) -> None:
    leases = backend.leases
    await leases.claim(["x"], "a", 60_000)
    await leases.claim(["y"], "b", 60_000)
    await leases.release(["x", "y"], "a")
    assert await leases.holder("x") is None
    assert (await leases.holder("y") or ("", 0))[0] == "b"
    assert await leases.claim(["x"], "b", 60_000) == ["x"]


async def test_of_claims_at_once_each_stream_goes_to_one(backend: Store) -> None:
    streams = [f"resp_{i}" for i in range(20)]
    won = await asyncio.gather(*[backend.leases.claim(streams, o, 60_000) for o in "abcd"])
    assert sorted(s for w in won for s in w) == sorted(streams)


async def test_settle_leaves_the_log_as_it_is(backend: Store) -> None:
    """The barrier a new owner passes before reading what it took over (its waiting for
    another server's appends: tests/events/test_postgres_store.py)."""
    await backend.append([deltas("resp_s", 0, 3)])
    await backend.leases.settle()
    assert [e.seq for e in await backend.read("resp_s")] == [0, 1, 2]
