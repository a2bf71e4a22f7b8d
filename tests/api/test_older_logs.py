"""A real start on a SQLite log whose accepted requests say nothing of `store`, as
bench/inspection.py writes it (tests/older_facts.py): the server serves, and keeps them."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

import httpx

from omni.db import upgrade
from omni.runtime.chat.engine import MLXEngine
from tests.older_facts import CHAT, FINISHED, RUNNING, rows
from tests.server import running


def test_a_server_starts_and_serves_on_facts_without_store(
    tiny_engine: MLXEngine, tmp_path: Path
) -> None:
    db = tmp_path / "omni.db"
    upgrade(str(db))
    now = int(time.time() * 1000)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.executemany(
            "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
            [(*row, now) for row in rows()],
        )
    with running(tiny_engine, db) as (srv, client):
        assert client.responses.retrieve(RUNNING).status == "failed"  # its server stopped
        assert client.responses.retrieve(FINISHED).status == "completed"
        assert [c.id for c in client.chat.completions.list()] == [CHAT]
        assert httpx.get(f"{srv.base_url}/health").status_code == 200
