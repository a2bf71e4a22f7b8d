"""The replay-cache index is a projection the database keeps (migration 0004's triggers):
whoever writes the log (an append, a tombstone, a purge, sqlite3 by hand), the index says
what the log says, and a rebuild from the whole log gives the same rows."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command

from omni.db import alembic_config, upgrade
from omni.events import Append, EventStore, NewEvent
from omni.events.sqlite import maintenance

from ._helpers import ACCEPTED, USAGE, deltas, ev, finished_chat, finished_message

TOMBSTONE = "omni.completion.deleted"


def rows(db_path: Path | str) -> list[tuple[str, str, int]]:
    with closing(sqlite3.connect(str(db_path))) as conn:
        return sorted(conn.execute("SELECT key, completion_id, created_at FROM chat_cache"))


def tombstone(cid: str, seq: int = 1) -> Append:
    return Append(f"{cid}/request", seq, [NewEvent(TOMBSTONE, "{}")])


async def test_a_rebuild_equals_what_the_triggers_kept(db_path: Path) -> None:
    store = EventStore(str(db_path), cache_max_entries=-1)
    await store.open()
    try:
        await store.append(finished_chat("chatcmpl-a", "k1"))
        await store.append(finished_chat("chatcmpl-b", "k2"))
        await store.append(finished_chat("chatcmpl-c", "k1"))  # k1 again, newer
        await store.append(finished_chat("chatcmpl-d", "k3", store=False))  # not stored
        await store.append(finished_chat("chatcmpl-e", "k1", mirror_of="chatcmpl-a"))  # a copy
        await store.append(finished_chat("chatcmpl-f", None))  # sampled: no key
        cut = finished_chat("chatcmpl-g", "k4")  # cancelled: no usage chunk
        await store.append([cut[0], Append("chatcmpl-g", 0, [ev("completion.cancelled")])])
        await store.append(finished_chat("chatcmpl-h", "k5"))
        await store.append([tombstone("chatcmpl-h")])  # deleted once finished
        request, stream = finished_chat("chatcmpl-i", "k6")
        await store.append([request, tombstone("chatcmpl-i")])  # deleted while it ran
        await store.append([stream])
        await store.append(finished_chat("chatcmpl-j", "k7"))
        await store.purge(["chatcmpl-j", "chatcmpl-j/request"])  # purged
        await store.append(finished_chat("chatcmpl-k", "k8"))
        await store.purge(["chatcmpl-k/request"])  # its request gone: no longer replayable
        await store.append(
            [Append("resp_x", 0, [ev("response.completed")]), deltas("resp_x/request", 0, 1)]
        )
        # Messages (0012): indexed at message_stop, by the same rules.
        await store.append(finished_message("msg_a", "m1"))
        await store.append(finished_message("msg_b", "m2", store=False))  # not stored
        await store.append(finished_message("msg_c", "m1", mirror_of="msg_a"))  # a copy
        await store.append(finished_message("msg_d", None))  # sampled: no key
        request, stream = finished_message("msg_e", "m3")  # failed: no message_stop
        await store.append([request, Append("msg_e", 0, [ev("message_start"), ev("error")])])
        await store.append(finished_message("msg_f", "m4"))
        await store.append([tombstone("msg_f")])  # a tombstone, were one written
        await store.append(finished_message("msg_g", "m5"))
        await store.purge_objects(["msg_g"])  # purged
        await store.append(finished_message("msg_h", "m1"))  # m1 again, newer
        kept = rows(db_path)
        assert [(k, c) for k, c, _ in kept] == [
            ("k1", "chatcmpl-a"),
            ("k1", "chatcmpl-c"),
            ("k2", "chatcmpl-b"),
            ("m1", "msg_a"),
            ("m1", "msg_h"),
        ]
        assert await store.cache.lookup("k1") == "chatcmpl-c"  # the newest answers
        assert await store.cache.lookup("m1") == "msg_h"
        assert await store.cache.rebuild() == 5
        assert rows(db_path) == kept
        assert await store.cache.lookup("m1") == "msg_h"  # the rebuild keeps their order
        await store.append([tombstone("chatcmpl-c")])
        assert await store.cache.lookup("k1") == "chatcmpl-a"  # the one before answers again
    finally:
        await store.close()


def test_any_writer_of_the_log_keeps_the_index(db_path: Path) -> None:
    """A person with sqlite3, `omni db purge`: the rows of a removed completion go with it."""
    with closing(sqlite3.connect(str(db_path))) as conn, conn:
        for cid, key in (("chatcmpl-a", "ka"), ("chatcmpl-b", "kb"), ("chatcmpl-c", "kc")):
            for append in finished_chat(cid, key):
                conn.executemany(
                    "INSERT INTO events (stream_id, seq, type, data, created_at)"
                    " VALUES (?,?,?,?,1)",
                    [(append.stream_id, i, e.type, e.data) for i, e in enumerate(append.events)],
                )
        for append in finished_message("msg_a", "ma") + finished_message("msg_b", "mb"):
            conn.executemany(
                "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?,?,?,?,1)",
                [(append.stream_id, i, e.type, e.data) for i, e in enumerate(append.events)],
            )
    indexed = ["chatcmpl-a", "chatcmpl-b", "chatcmpl-c", "msg_a", "msg_b"]
    assert [c for _, c, _ in rows(db_path)] == indexed
    with closing(sqlite3.connect(str(db_path))) as conn, conn:
        conn.execute("DELETE FROM events WHERE stream_id IN ('chatcmpl-a', 'msg_a')")
    with closing(maintenance.connect(str(db_path))) as conn:
        maintenance.purge(conn, ["chatcmpl-b"])
    assert [c for _, c, _ in rows(db_path)] == ["chatcmpl-c", "msg_b"]


def test_the_migration_rebuilds_an_older_index_from_the_log(tmp_path: Path) -> None:
    """A log indexed by the old service code (0002) may point at a deleted completion (the
    bug: no code path removed it): the upgrade makes the index from the log instead."""
    db = tmp_path / "old.db"
    command.upgrade(alembic_config(str(db)), "0003")
    facts = [
        *finished_chat("chatcmpl-kept", "k1"),
        *finished_chat("chatcmpl-gone", "k2"),
        tombstone("chatcmpl-gone"),
        *finished_chat("chatcmpl-unstored", "k3", store=False),
    ]
    with closing(sqlite3.connect(str(db))) as conn, conn:
        for append in facts:
            conn.executemany(
                "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?,?,?,?,7)",
                [
                    (append.stream_id, append.first_seq + i, e.type, e.data)
                    for i, e in enumerate(append.events)
                ],
            )
        conn.executemany(
            "INSERT INTO chat_cache VALUES (?,?,7)",
            [("k1", "chatcmpl-kept"), ("k2", "chatcmpl-gone"), ("k3", "chatcmpl-unstored")],
        )
    upgrade(str(db))
    assert rows(db) == [("k1", "chatcmpl-kept", 7)]
    with closing(sqlite3.connect(str(db))) as conn:
        accepted = conn.execute("SELECT data FROM events WHERE type = ?", (ACCEPTED,)).fetchall()
        usage = conn.execute("SELECT count(*) FROM events WHERE type = ?", (USAGE,)).fetchone()
    assert len(accepted) == 3 and usage == (3,)
    assert json.loads(accepted[0][0])["key"] == "k1"
