"""Migration 0013 on a log written by hand: a conversation's summaries row (completed at once,
deleted at its tombstone) and its `conversations` view row (items added less deleted, the
turns that added theirs), the same on SQLite and on PostgreSQL (whose own triggers index the
copied events), and the rebuild over a log written before the migration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from alembic import command

from omni.db import alembic_config, upgrade
from omni.inspect import Inspector, open_log
from tests.inspect.test_postgres import copy, pg_rows, sqlite_rows
from tests.postgres import database

ADDED, ITEM_DELETED = "omni.conversation.item.added", "omni.conversation.item.deleted"


Row = dict[str, Any]


def _append(conn: sqlite3.Connection, stream: str, seq: int, type_: str, data: Row, at: int
            ) -> None:  # fmt: skip
    conn.execute(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (stream, seq, type_, json.dumps(data), at),
    )


def _item(n: int, response_id: str | None = None) -> dict[str, Any]:
    content = [{"type": "input_text", "text": f"said {n}"}]
    item = {"id": f"msg_{n}", "type": "message", "role": "user", "content": content}
    return {"item": item} if response_id is None else {"item": item, "response_id": response_id}


def _log(path: Path, revision: str = "head") -> None:
    """Two conversations: one with items, a deleted item and two turns; one deleted."""
    command.upgrade(alembic_config(str(path)), revision)
    with sqlite3.connect(path) as conn:
        for n, cid in enumerate(("conv_kept", "conv_gone")):
            request = {"kind": "conversation", "body": {"metadata": {"topic": cid}, "store": True},
                       "created_at": n, "owner": "alice"}  # fmt: skip
            _append(conn, f"{cid}/request", 0, "omni.request.accepted", request, 1000 * n + 7)
        for seq, data in enumerate(
            [_item(0), _item(1), _item(2, "resp_a"), _item(3, "resp_a"), _item(4, "resp_b")]
        ):
            _append(conn, "conv_kept", seq, ADDED, data, 2000 + seq)
        _append(conn, "conv_kept", 5, ITEM_DELETED, {"item_id": "msg_1"}, 2100)
        _append(conn, "conv_kept/request", 1, "omni.conversation.updated", {"metadata": {}}, 9)
        _append(conn, "conv_gone/request", 1, "omni.conversation.deleted", {}, 3000)


SUMMARIES = (
    "SELECT id, kind, status, model, owner, background, store, started_at, finished_at,"
    " deleted FROM summaries ORDER BY position"
)
VIEW = "SELECT * FROM conversations ORDER BY created_ms, id"


def test_summaries_and_the_view(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    assert [tuple(r.values()) for r in sqlite_rows(path, SUMMARIES)] == [
        ("conv_kept", "conversation", "completed", None, "alice", 0, 1, 7, 7, 0),
        ("conv_gone", "conversation", "completed", None, "alice", 0, 1, 1007, 1007, 1),
    ]
    assert sqlite_rows(path, VIEW) == [
        {"id": "conv_kept", "created": "1970-01-01T00:00:00.007Z", "items": 4, "turns": 2,
         "deleted": 0, "owner": "alice", "created_ms": 7},
        {"id": "conv_gone", "created": "1970-01-01T00:00:01.007Z", "items": 0, "turns": 0,
         "deleted": 1, "owner": "alice", "created_ms": 1007},
    ]  # fmt: skip


def test_the_rebuild_folds_a_log_written_before_the_migration(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    _log(fresh)
    _log(old, "0012")
    command.upgrade(alembic_config(str(old)), "head")
    assert sqlite_rows(old, SUMMARIES) == sqlite_rows(fresh, SUMMARIES)
    assert sqlite_rows(old, VIEW) == sqlite_rows(fresh, VIEW)
    command.downgrade(alembic_config(str(old)), "0012")
    with sqlite3.connect(old) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not {"conversations", "summaries_on_conversation"} & names


def test_the_conversations_view_on_postgresql(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    with database("omni_conversations") as url:
        upgrade(url)
        copy(path, url)
        for query in (SUMMARIES, VIEW):
            expected = sqlite_rows(path, query)
            assert len(expected) == 2 and pg_rows(url, query) == expected


def test_the_inspector_lists_and_shows_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    _log(path)
    engine = open_log(str(path))
    try:
        with engine.connect() as conn:
            inspector = Inspector(conn)
            listed = inspector.recent(kind="conversation")
            assert [s.id for s in listed] == ["conv_gone", "conv_kept"]
            assert [s.status for s in listed] == ["completed", "completed"]
            assert listed[1].output_tokens is None and listed[1].preview.startswith("user: said 0")
            detail = inspector.detail("conv_kept")
            assert detail is not None
            assert detail.output_text.splitlines() == [
                "user: said 0", "user: said 2", "user: said 3", "user: said 4"
            ]  # fmt: skip
            assert detail.request["input"] == []  # it asks nothing of a model
            assert detail.request["metadata"] == {"topic": "conv_kept"}
            assert inspector.recent(kind="conversation", owner="bob") == []
    finally:
        engine.dispose()
