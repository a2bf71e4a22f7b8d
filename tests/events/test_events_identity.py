"""A log file deleted or replaced under the store: one error line, then every write and
read refused (503), and nothing written to the file that now has the path."""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from omni.errors import StoreUnavailable
from omni.events import Appender, EventStore

from .test_events_write_faults import big


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_file_deleted_or_replaced_under_the_store_stops_it(
    store: EventStore,
    appender: Appender,
    db_path: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    await appender.append(big("s", 0))
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE mine (x)")
    before = other.read_bytes()
    if how == "deleted":
        os.remove(db_path)
    else:
        os.replace(other, db_path)
    for attempt in (
        appender.append(big("s", 1)),
        store.read("s"),  # memory holds it, but the file it came from is gone
        store.read("unknown"),
        store.cache.lookup("key"),
        store.purge(["s"]),
    ):
        with pytest.raises(StoreUnavailable) as refused:
            await attempt
    assert refused.value.status == 503 and refused.value.code == "database_unavailable"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and how in errors[0].getMessage()
    await appender.stop()
    await store.close()  # its last checkpoint goes to the file it had open
    if how == "replaced":
        assert db_path.read_bytes() == before  # nothing of ours went into the new file
