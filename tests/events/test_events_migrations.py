"""omni.db.upgrade: the Alembic migrations that create the event table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from omni.db import alembic_config, upgrade
from omni.errors import StoreError

INSERT = "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)"


def _query(path: Path, sql: str, *args: object) -> list[tuple]:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_upgrade_twice_is_idempotent_and_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    upgrade(str(path))
    schema_before = _query(path, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    conn = sqlite3.connect(str(path))
    with conn:
        conn.execute(INSERT, ("s", 0, "t", "{}", 1))
    conn.close()

    upgrade(str(path))  # must not fail, recreate, or drop anything

    assert _query(path, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == schema_before
    assert _query(path, "SELECT stream_id, seq, type, data, created_at FROM events") == [
        ("s", 0, "t", "{}", 1)
    ]
    head = ScriptDirectory.from_config(alembic_config(str(path))).get_current_head()
    assert head is not None
    assert _query(path, "SELECT version_num FROM alembic_version") == [(head,)]
    assert _query(path, "PRAGMA integrity_check") == [("ok",)]


def test_events_table_has_exactly_the_designed_columns(db_path: Path) -> None:
    cols = _query(db_path, "PRAGMA table_info(events)")
    # (cid, name, type, notnull, dflt_value, pk)
    # notnull is not checked for the primary key (rowid alias: never NULL anyway)
    assert [(c[1], c[2].upper(), c[3] if not c[5] else None, c[5]) for c in cols] == [
        ("position", "INTEGER", None, 1),
        ("stream_id", "TEXT", 1, 0),
        ("seq", "INTEGER", 1, 0),
        ("type", "TEXT", 1, 0),
        ("data", "TEXT", 1, 0),
        ("created_at", "INTEGER", 1, 0),
    ]
    (sql,) = _query(db_path, "SELECT sql FROM sqlite_master WHERE name='events'")[0]
    assert "AUTOINCREMENT" in sql.upper()  # positions are never reused


def test_events_table_has_unique_stream_seq(db_path: Path) -> None:
    indexes = _query(db_path, "PRAGMA index_list(events)")
    # (seq, name, unique, origin, partial)
    unique = [i for i in indexes if i[2] == 1 and i[3] == "u"]
    assert len(unique) == 1
    cols = [c[2] for c in _query(db_path, f"PRAGMA index_info('{unique[0][1]}')")]
    assert cols == ["stream_id", "seq"]

    # and it is enforced
    conn = sqlite3.connect(str(db_path))
    try:
        with conn:
            conn.execute(INSERT, ("s", 0, "a", "1", 1))
        with pytest.raises(sqlite3.IntegrityError), conn:
            conn.execute(INSERT, ("s", 0, "b", "2", 2))
        with conn:  # same seq on another stream is fine
            conn.execute(INSERT, ("t", 0, "a", "1", 1))
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (2,)
    finally:
        conn.close()


def test_type_index_exists(db_path: Path) -> None:
    names = [i[1] for i in _query(db_path, "PRAGMA index_list(events)")]
    assert "ix_events_type" in names
    cols = [c[2] for c in _query(db_path, "PRAGMA index_info('ix_events_type')")]
    assert cols == ["type"]


def test_upgrade_sets_wal(db_path: Path) -> None:
    assert _query(db_path, "PRAGMA journal_mode")[0][0].lower() == "wal"


def test_upgrade_in_missing_folder_raises_store_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(StoreError) as info:
        upgrade(str(missing / "omni.db"))
    message = info.value.message
    assert str(missing) in message
    assert "does not exist" in message
    assert not (tmp_path / "no").exists()  # nothing was created on the way


def test_upgrade_on_non_database_file_raises_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    content = b"definitely not sqlite\n" * 100
    path.write_bytes(content)
    with pytest.raises(StoreError) as info:
        upgrade(str(path))
    assert str(path) in info.value.message
    assert path.read_bytes() == content  # left alone


def test_upgrade_under_a_plain_file_raises_store_error(tmp_path: Path) -> None:
    parent = tmp_path / "file"
    parent.write_text("x")
    with pytest.raises(StoreError) as info:
        upgrade(str(parent / "omni.db"))
    assert "cannot" in info.value.message


def test_upgrade_leaves_no_connection_open(tmp_path: Path) -> None:
    """When the last connection to a WAL database closes, SQLite checkpoints and removes the
    WAL: none left open by the upgrade means a stopped server leaves just the database file."""
    path = tmp_path / "omni.db"
    upgrade(str(path))
    assert not Path(f"{path}-wal").exists()
    assert _query(path, "PRAGMA journal_mode") == [("wal",)]


def test_discard_unused_removes_only_a_database_without_events(tmp_path: Path) -> None:
    from omni.db import discard_unused

    empty, used = tmp_path / "empty.db", tmp_path / "used.db"
    for path in (empty, used):
        upgrade(str(path))
    conn = sqlite3.connect(str(used))
    with conn:
        conn.execute(INSERT, ("s", 0, "t", "{}", 1))
    conn.close()
    (tmp_path / "not-sqlite.db").write_text("someone's notes")
    for path in (empty, used, tmp_path / "not-sqlite.db", tmp_path / "absent.db"):
        discard_unused(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-sqlite.db", "used.db"]
