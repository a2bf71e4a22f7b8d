"""A purge removes the bytes too: zeroed in the database file (secure_delete), and gone from
the WAL (a TRUNCATE checkpoint after it), without stalling the appends when a reader holds an
older snapshot meanwhile."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from omni.events import Append, EventStore, NewEvent
from omni.events.sqlite import connections as store_module

from ._helpers import deltas


def holding(db_path: str, text: str) -> list[str]:
    """The log's files (database, WAL) whose raw bytes hold `text`."""
    needle = text.encode()
    return [
        Path(p).name
        for p in (db_path, f"{db_path}-wal")
        if Path(p).exists() and needle in Path(p).read_bytes()
    ]


async def until(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def secret(store: EventStore, stream: str) -> str:
    """Append a row holding a fresh marker to `stream` and its /request stream, and copy it
    into the database file as well (a checkpoint), as a long-lived server would have."""
    marker = f"secret-{uuid.uuid4().hex}"
    data = '{"text":"' + marker + " " + "x" * 6000 + '"}'  # overflow pages too
    await store.append(
        [
            Append(f"{stream}/request", 0, [NewEvent("omni.request.accepted", data)]),
            Append(stream, 0, [NewEvent("chat.completion.chunk", data)]),
        ]
    )
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    assert holding(store.path, marker) == ["omni.db", "omni.db-wal"]
    return marker


async def test_purged_bytes_leave_the_database_and_the_wal(store: EventStore) -> None:
    await store.append([deltas("kept", 0, 3)])
    marker = await secret(store, "chatcmpl-x")
    assert await store.purge(["chatcmpl-x", "chatcmpl-x/request"]) == 2
    assert await until(lambda: store.scrubs >= 1)  # counted after the checkpoint returns
    assert not holding(store.path, marker), holding(store.path, marker)
    assert [e.seq for e in await store.read("kept")] == [0, 1, 2]


async def test_a_reader_of_an_older_snapshot_delays_the_scrub_not_the_appends(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "SCRUB_EVERY_S", 0.05)
    monkeypatch.setattr(store_module, "SCRUB_EVERY_MAX_S", 0.2)
    marker = await secret(store, "resp_x")
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchall()  # holds its snapshot
        await store.purge(["resp_x", "resp_x/request"])
        # Tries, cannot empty the WAL, backs off; the appends meanwhile all commit.
        assert await until(lambda: store._scrub_every > store_module.SCRUB_EVERY_S)
        for seq in range(20):
            await asyncio.wait_for(store.append([deltas("s", seq, 1)]), 10)
        assert store.scrubs == 0
        assert holding(store.path, marker)  # the reader's snapshot still holds it
        reader.execute("ROLLBACK")
    finally:
        reader.close()
    # The count moves once the checkpoint's result reaches the loop, after the file changed.
    assert await until(lambda: store.scrubs >= 1)
    assert not holding(store.path, marker)
    assert [e.seq for e in await store.read("s")] == list(range(20))
