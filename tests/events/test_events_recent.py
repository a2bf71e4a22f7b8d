"""The in-memory tail of recently committed rows answers exactly what SQLite would."""

from __future__ import annotations

from omni.events import EventStore, StoredEvent
from omni.events.sqlite.recent import RecentRows


def ev(stream: str, seq: int) -> StoredEvent:
    return StoredEvent(seq + 1, stream, seq, "t", f'{{"n":{seq}}}', 0)


def test_contiguous_tail_answers_and_a_gap_is_never_trusted() -> None:
    recent = RecentRows(per_stream=4)
    recent.add([ev("s", 0), ev("s", 1), ev("s", 2)])
    assert [e.seq for e in recent.after("s", -1, None) or []] == [0, 1, 2]
    assert [e.seq for e in recent.after("s", 0, 1) or []] == [1]
    assert recent.after("s", 2, None) == []
    recent.add([ev("s", 3), ev("s", 4)])  # the oldest falls out of a 4-row tail
    assert recent.after("s", -1, None) is None  # seq 0 is no longer held: ask SQLite
    assert [e.seq for e in recent.after("s", 0, None) or []] == [1, 2, 3, 4]
    recent.add([ev("s", 9)])  # a gap: only the new row is trusted
    assert recent.after("s", 4, None) is None
    assert [e.seq for e in recent.after("s", 8, None) or []] == [9]
    assert recent.last("s") == ev("s", 9)
    recent.forget(["s"])
    assert recent.after("s", 8, None) is None and recent.last("s") is None


async def test_reads_from_memory_equal_reads_from_sqlite(store: EventStore, db_path) -> None:  # type: ignore[no-untyped-def]
    from tests.events._helpers import deltas

    await store.append([deltas("s", 0, 5), deltas("t", 0, 3)])
    await store.append([deltas("s", 5, 5)])
    cold = EventStore(str(db_path), recent_rows=0)
    await cold.open()
    try:
        for after in (-1, 0, 4, 8, 9, 20):
            for limit in (None, 1, 3):
                assert await store.read("s", after, limit) == await cold.read("s", after, limit)
        assert await store.last("s") == await cold.last("s")
        assert await store.read("t") == await cold.read("t")
    finally:
        await cold.close()


def test_a_stream_opened_empty_answers_empty_until_its_rows_come() -> None:
    recent = RecentRows(per_stream=4)
    recent.add([ev("request", 0)], opened=["chat"])
    assert recent.after("chat", -1, None) == []  # known empty: no need to ask SQLite
    assert recent.last("chat") is None  # (the newest row: SQLite's to say)
    assert recent.after("never-opened", -1, None) is None
    recent.add([ev("chat", 0), ev("chat", 1)])
    assert [e.seq for e in recent.after("chat", -1, None) or []] == [0, 1]
    recent.add([], opened=["chat"])  # opened again: what it holds stays
    assert [e.seq for e in recent.after("chat", 0, None) or []] == [1]


async def test_an_empty_opening_is_read_from_memory(store: EventStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from omni.events import Append
    from tests.events._helpers import deltas

    await store.append([deltas("req", 0, 1), Append("chat", 0, [])])

    async def no_sql(*args: object) -> None:
        raise AssertionError("read went to SQLite")

    monkeypatch.setattr(store, "_fetch", no_sql)
    assert await store.read("chat") == []
    monkeypatch.undo()
    await store.append([deltas("chat", 0, 2)])
    assert [e.seq for e in await store.read("chat")] == [0, 1]
