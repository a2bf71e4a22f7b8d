"""omni/events/sqlite/maintenance.py on hand-made logs: check, finished/purge, backup, the lock."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from omni import cli
from omni.errors import StoreError
from omni.events.maintenance import parse_duration, parse_moment
from omni.events.sqlite import maintenance
from omni.lock import DatabaseLock
from omni.service.retention import VOCABULARY

DAY = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 40 * DAY  # ended 40 days ago


@pytest.fixture
def conn(db_path: Path) -> Iterator[sqlite3.Connection]:
    with closing(maintenance.connect(str(db_path))) as c:
        yield c


def put(
    c: sqlite3.Connection, stream: str, types: list[str], at: int = OLD, first: int = 0
) -> None:
    c.executemany(
        "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?,?,?,?,?)",
        [(stream, first + i, t, _data(t), at) for i, t in enumerate(types)],
    )


def _data(type_: str) -> str:
    if type_ == "response.incomplete":
        return json.dumps({"response": {"status": "cancelled"}})
    return json.dumps({"response": {"status": type_.split(".")[-1]}})


def response(c: sqlite3.Connection, rid: str, end: str | None, at: int = OLD) -> None:
    put(c, f"{rid}/request", ["omni.request.accepted"], at)
    body = ["response.created", "response.in_progress", "response.output_text.delta"]
    put(c, rid, body + ([end] if end else []), at)


def chat(c: sqlite3.Connection, cid: str, end: str | None, at: int = OLD) -> None:
    put(c, f"{cid}/request", ["omni.request.accepted"], at)
    put(c, cid, ["chat.completion.chunk"] * 3 + ([end] if end else []), at)


def problems(c: sqlite3.Connection) -> set[tuple[str, str]]:
    return {(p.stream_id, p.what) for p in maintenance.check(c, VOCABULARY)}


def test_a_sound_log_passes(conn: sqlite3.Connection) -> None:
    response(conn, "resp_a", "response.completed")
    response(conn, "resp_b", None)  # still running: no terminal yet is fine
    put(conn, "resp_b/tokens", ["omni.tokens"] * 2)
    chat(conn, "chatcmpl-a", "chat.completion.usage")
    put(conn, "chatcmpl-a/request", ["omni.completion.deleted"], first=1)
    conn.execute("INSERT INTO chat_cache VALUES ('k', 'chatcmpl-a', 1)")
    assert maintenance.check(conn, VOCABULARY) == []


ACCEPTED = ["omni.request.accepted"]
BROKEN = {
    "gap-at-0": (
        [("resp_g/request", ACCEPTED, 0), ("resp_g", ["response.created", "x"], 1)],
        ("resp_g", "seq not contiguous from 0: 2 rows, 1..2"),
    ),
    "gap-inside": (
        [("resp_g/tokens", ["omni.tokens"] * 2, 0), ("resp_g/tokens", ["omni.tokens"], 3)],
        ("resp_g/tokens", "seq not contiguous from 0: 3 rows, 0..3"),
    ),
    "two-ends": (
        [("resp_g/request", ACCEPTED, 0), ("resp_g", ["response.completed", "response.failed"], 0)],
        ("resp_g", "2 terminal events"),
    ),
    "after-end": (
        [
            ("chatcmpl-g/request", ACCEPTED, 0),
            ("chatcmpl-g", ["chat.completion.usage", "chat.completion.chunk"], 0),
        ],
        ("chatcmpl-g", "events after the terminal event at seq 0"),
    ),
    "no-request": ([("cmpl-g", ["text_completion.chunk"], 0)], ("cmpl-g", "no /request stream")),
    "bad-request": (
        [("resp_g/request", ["omni.response.deleted"], 0), ("resp_g", ["response.created"], 0)],
        ("resp_g", "/request opens with omni.response.deleted"),
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_finds_each_broken_invariant(conn: sqlite3.Connection, case: str) -> None:
    response(conn, "resp_ok", "response.completed")  # a sound neighbour is not reported
    rows, expected = BROKEN[case]
    for stream, types, first in rows:
        put(conn, stream, types, first=first)
    assert problems(conn) == {expected}


def test_check_finds_a_cache_row_without_its_completion(conn: sqlite3.Connection) -> None:
    chat(conn, "chatcmpl-ok", "chat.completion.usage")
    conn.execute("INSERT INTO chat_cache VALUES ('k1', 'chatcmpl-ok', 1), ('k2', 'chatcmpl-x', 1)")
    assert problems(conn) == {("chatcmpl-x", "replay-cache entry k2 points at no stream")}


def test_check_reports_sqlite_damage(db_path: Path) -> None:
    with closing(sqlite3.connect(db_path)) as c:
        for i in range(300):
            response(c, f"resp_{i:04}", "response.completed")
        c.commit()
        c.execute("PRAGMA writable_schema=ON")  # drop the type index, leave its pages behind
        c.execute("DELETE FROM sqlite_master WHERE name = 'ix_events_type'")
        c.commit()
    with closing(maintenance.connect(str(db_path))) as c:
        found = maintenance.check(c, VOCABULARY)
    assert found and all(p.stream_id == "" for p in found)
    assert "never used" in found[0].what


def test_finished_statuses_and_cutoff(conn: sqlite3.Connection) -> None:
    response(conn, "resp_done", "response.completed")
    response(conn, "resp_cancel", "response.incomplete")  # its data says "cancelled"
    response(conn, "resp_fail", "response.failed")
    response(conn, "resp_run", None)  # running: never
    response(conn, "resp_new", "response.completed", at=NOW)  # too recent
    response(conn, "resp_del", "response.completed")
    put(conn, "resp_del/request", ["omni.response.deleted"], first=1)
    response(conn, "resp_delrun", None)  # deleted while it runs: not until it has ended
    put(conn, "resp_delrun/request", ["omni.response.deleted"], first=1)
    response(conn, "resp_delnew", "response.completed")  # deleted today: ended today
    put(conn, "resp_delnew/request", ["omni.response.deleted"], at=NOW, first=1)
    chat(conn, "chatcmpl-done", "chat.completion.usage")
    chat(conn, "chatcmpl-err", "completion.error")
    chat(conn, "cmpl-stop", "completion.cancelled")
    before = NOW - 30 * DAY
    found = {f.id: f.status for f in maintenance.finished(conn, VOCABULARY, before)}
    assert found == {
        "resp_done": "completed",
        "resp_cancel": "cancelled",
        "resp_fail": "failed",
        "resp_del": "deleted",
        "chatcmpl-done": "completed",
        "chatcmpl-err": "failed",
        "cmpl-stop": "cancelled",
    }
    some = maintenance.finished(conn, VOCABULARY, before, {"deleted", "failed"})
    assert {f.id for f in some} == {"resp_del", "resp_fail", "chatcmpl-err"}
    everything = maintenance.finished(conn, VOCABULARY, NOW + 1)
    assert {"resp_new", "resp_delnew"} <= {f.id for f in everything}
    assert not {"resp_run", "resp_delrun"} & {f.id for f in everything}


def test_purge_removes_whole_objects_and_nothing_else(conn: sqlite3.Connection) -> None:
    response(conn, "resp_a", "response.completed")
    put(conn, "resp_a/tokens", ["omni.tokens"])
    response(conn, "resp_keep", "response.completed", at=NOW)
    chat(conn, "chatcmpl-a", "chat.completion.usage")
    chat(conn, "chatcmpl-keep", "chat.completion.usage", at=NOW)
    conn.execute(
        "INSERT INTO chat_cache VALUES ('ka', 'chatcmpl-a', 1), ('kk', 'chatcmpl-keep', 1)"
    )
    before = sorted(conn.execute("SELECT * FROM events WHERE created_at = ?", (NOW,)).fetchall())
    doomed = [f.id for f in maintenance.finished(conn, VOCABULARY, NOW - DAY)]
    assert sorted(doomed) == ["chatcmpl-a", "resp_a"]
    assert maintenance.count_events(conn, doomed) == 5 + 1 + 5
    assert maintenance.purge(conn, doomed, per_transaction=1) == 11
    assert sorted(conn.execute("SELECT * FROM events").fetchall()) == before
    assert conn.execute("SELECT key FROM chat_cache").fetchall() == [("kk",)]
    assert maintenance.check(conn, VOCABULARY) == []


def message(c: sqlite3.Connection, mid: str, end: str | None, at: int = OLD) -> None:
    put(c, f"{mid}/request", ["omni.request.accepted"], at)
    body = ["message_start", "content_block_start", "content_block_delta", "content_block_stop"]
    put(
        c,
        mid,
        body + (["message_delta", end] if end == "message_stop" else [end] if end else []),
        at,
    )


def test_messages_end_each_way_and_are_purged_whole(conn: sqlite3.Connection) -> None:
    """Anthropic's Messages: message_stop completed, `error` failed, a cancel cancelled; a
    running one never; a purge takes its request and its replay-cache row along."""
    message(conn, "msg_done", "message_stop")
    message(conn, "msg_err", "error")
    message(conn, "msg_stop", "omni.message.cancelled")
    message(conn, "msg_run", None)
    message(conn, "msg_new", "message_stop", at=NOW)
    conn.execute("INSERT INTO chat_cache VALUES ('kd', 'msg_done', 1), ('kn', 'msg_new', 1)")
    assert problems(conn) == set()
    found = {f.id: f.status for f in maintenance.finished(conn, VOCABULARY, NOW - DAY)}
    assert found == {"msg_done": "completed", "msg_err": "failed", "msg_stop": "cancelled"}
    assert maintenance.purge(conn, list(found)) == 7 + 6 + 6
    left = {r[0] for r in conn.execute("SELECT DISTINCT stream_id FROM events")}
    assert left == {"msg_run", "msg_run/request", "msg_new", "msg_new/request"}
    assert conn.execute("SELECT key FROM chat_cache").fetchall() == [("kn",)]
    assert maintenance.check(conn, VOCABULARY) == []


def test_backup_copies_and_never_overwrites(conn: sqlite3.Connection, tmp_path: Path) -> None:
    response(conn, "resp_a", "response.completed")
    target = tmp_path / "copy.db"
    maintenance.backup(str(conn_path(conn)), str(target))
    with closing(sqlite3.connect(target)) as copy:
        assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        rows = copy.execute("SELECT * FROM events ORDER BY position").fetchall()
    assert rows == conn.execute("SELECT * FROM events ORDER BY position").fetchall()
    assert not (tmp_path / "copy.db.partial").exists()
    with pytest.raises(StoreError, match="never overwrites"):
        maintenance.backup(str(conn_path(conn)), str(target))


def conn_path(c: sqlite3.Connection) -> str:
    return str(c.execute("PRAGMA database_list").fetchone()[2])


def test_a_purge_waits_for_no_live_server(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with closing(sqlite3.connect(db_path)) as c:
        response(c, "resp_a", "response.completed")
        c.commit()
    lock = DatabaseLock.acquire(str(db_path))  # as a live omni serve holds it
    try:
        assert cli.main(["db", "purge", "--db", str(db_path), "--older-than", "30d"]) == 1
        err = capsys.readouterr().err
        assert f"in use by another omni serve (pid {os.getpid()})" in err
        assert "--retention" in err
        # A dry run only reads: allowed.
        dry = ["db", "purge", "--db", str(db_path), "--older-than", "30d", "--dry-run"]
        assert cli.main(dry) == 0
        assert "resp_a\tcompleted" in capsys.readouterr().out
    finally:
        lock.release()
    assert cli.main(["db", "purge", "--db", str(db_path), "--older-than", "30d"]) == 0
    assert "removed 1 responses, 0 completions: 5 events" in capsys.readouterr().out


def test_durations_and_dates() -> None:
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("90m") == 5400
    assert parse_duration("1d12h") == 1.5 * 86400
    for bad in ("", "30", "d", "3x", "-1d", "1d 2h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    utc = datetime(2025, 1, 31, tzinfo=UTC)
    assert parse_moment("2025-01-31T00:00:00+00:00") == int(utc.timestamp() * 1000)
    assert parse_moment("2025-01-31") == int(datetime(2025, 1, 31).timestamp() * 1000)
    with pytest.raises(ValueError):
        parse_moment("last tuesday")


def conversation(c: sqlite3.Connection, cid: str, deleted_at: int | None, at: int = OLD) -> None:
    put(c, f"{cid}/request", ["omni.request.accepted"], at)
    put(c, cid, ["omni.conversation.item.added"] * 2, at)
    if deleted_at is not None:
        put(c, f"{cid}/request", ["omni.conversation.deleted"], deleted_at, first=1)


def test_a_deleted_conversation_ends_when_deleted_and_is_purged_whole(
    conn: sqlite3.Connection,
) -> None:
    """A conversation has no ending of its own: its tombstone is one. Never purged while it is
    kept, however old; purged whole once deleted longer ago than the cut."""
    conversation(conn, "conv_gone", OLD)
    conversation(conn, "conv_kept", None)
    conversation(conn, "conv_new", NOW)  # deleted today
    response(conn, "resp_done", "response.completed")
    found = {f.id: f.status for f in maintenance.finished(conn, VOCABULARY, NOW - DAY)}
    assert found == {"conv_gone": "deleted", "resp_done": "completed"}
    assert maintenance.finished(conn, VOCABULARY, NOW - DAY, {"deleted"})[0].id == "conv_gone"
    assert maintenance.purge(conn, ["conv_gone"]) == 4
    left = {r[0] for r in conn.execute("SELECT DISTINCT stream_id FROM events")}
    assert not {s for s in left if s.startswith("conv_gone")}
    assert {"conv_kept", "conv_new/request"} <= left
