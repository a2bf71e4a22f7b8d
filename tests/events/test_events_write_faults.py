"""Writes that fail (a full disk, as SQLite reports it): one warning for the outage, no gap
in any stream, and the stream continues where it failed once the disk has room."""

from __future__ import annotations

import asyncio
import logging

import pytest

from omni.errors import StoreError
from omni.events import Append, Appender, EventStore, NewEvent
from tests.faults import disk_full


def big(stream_id: str, seq: int) -> Append:
    """An append that needs new pages (8 KB of data): a full disk refuses it."""
    return Append(stream_id, seq, [NewEvent("response.output_text.delta", '"' + "x" * 8000 + '"')])


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_full_disk_is_one_warning_and_leaves_no_gap(
    store: EventStore, appender: Appender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omni")
    await appender.append(big("s", 0))
    await disk_full(store)
    failed = [appender.submit(big("s", 1)), appender.submit(big("s", 2))]
    failed += [appender.submit(big(f"t{i}", 0)) for i in range(20)]
    results = await asyncio.gather(*failed, return_exceptions=True)
    assert all(isinstance(r, StoreError) for r in results), results
    assert "database or disk is full" in str(results[0])
    assert "an earlier append failed" in str(results[1])  # s@2 would follow a gap
    assert len(warnings(caplog)) == 1 and "disk is full" in warnings(caplog)[0]

    await disk_full(store, full=False)
    with pytest.raises(StoreError, match="an earlier append failed"):
        await appender.append(big("s", 2))  # still past the hole at 1
    await appender.append(big("s", 1))  # the stream continues where it failed
    await appender.append(big("s", 2))
    assert [e.seq for e in await store.read("s")] == [0, 1, 2]
    assert any("work again (" in r.getMessage() for r in caplog.records)
    assert len(warnings(caplog)) == 1


async def test_a_seq_conflict_is_no_outage(
    store: EventStore, appender: Appender, caplog: pytest.LogCaptureFixture
) -> None:
    """Two producers racing for one seq: the loser is refused, the stream goes on."""
    await appender.append(big("s", 0))
    with pytest.raises(StoreError):
        await appender.append(big("s", 0))
    await appender.append(big("s", 1))
    assert appender.failing == 0
