"""The item index (migration 0003): which responses hold an item id, kept by SQLite in
the transaction of the event that holds it, on every write path, emptied by purges, and built
from the events already there when a log is migrated."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command

from omni.db import alembic_config, upgrade
from omni.events import Append, EventStore, NewEvent

INSERT = "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, 0)"


def accepted(*ids: str) -> NewEvent:
    items = [{"id": i, "type": "message"} for i in ids]
    return NewEvent("omni.request.accepted", json.dumps({"kind": "response", "input": items}))


def done(item_id: str) -> NewEvent:
    return NewEvent("response.output_item.done", json.dumps({"item": {"id": item_id}}))


def rows(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT item_id, response_id FROM items ORDER BY 1, 2").fetchall()


async def test_inputs_and_outputs_are_indexed_in_their_append(store: EventStore) -> None:
    await store.append(
        [Append("resp_a/request", 0, [accepted("msg_in", "fc_in")]), Append("resp_a", 0, [])]
    )
    await store.append([Append("resp_a", 0, [NewEvent("response.created", "{}"), done("msg_out")])])
    # A later response holding a copy of an item (sent back as input) is its second holder.
    await store.append([Append("resp_b/request", 0, [accepted("msg_out", "msg_b")])])
    assert await store.item_holders("msg_in") == ["resp_a"]
    assert await store.item_holders("fc_in") == ["resp_a"]
    assert await store.item_holders("msg_out") == ["resp_a", "resp_b"]  # the maker first
    assert await store.item_holders("msg_b") == ["resp_b"]
    assert await store.item_holders("msg_none") == []


async def test_the_writer_threads_appends_are_indexed_too(db_path: Path) -> None:
    store = EventStore(str(db_path), synchronous="FULL")  # no direct appends on the loop
    await store.open()
    try:
        await store.append([Append("resp_t/request", 0, [accepted("msg_t")])])
        assert store._direct is None
        assert await store.item_holders("msg_t") == ["resp_t"]
    finally:
        await store.close()


async def test_other_events_index_nothing_and_no_row_makes_an_append_fail(
    store: EventStore, db_path: Path
) -> None:
    chat = {"kind": "chat", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    await store.append(
        [
            Append("chatcmpl-x/request", 0, [NewEvent("omni.request.accepted", json.dumps(chat))]),
            Append("resp_j/request", 0, [NewEvent("omni.request.accepted", "not json")]),
            Append("resp_k/request", 0, [NewEvent("omni.request.accepted", '{"input": "text"}')]),
            Append("resp_l/request", 0, [NewEvent("omni.request.accepted", '{"input": [1, "x"]}')]),
            Append("resp_j", 0, [NewEvent("response.output_item.done", "[]")]),
            Append("resp_k", 0, [NewEvent("response.output_text.delta", '{"item_id": "m"}')]),
        ]
    )
    assert rows(db_path) == []


async def test_purges_take_their_rows_along(store: EventStore, db_path: Path) -> None:
    for rid in ("resp_a", "resp_b", "resp_c"):
        await store.append(
            [
                Append(f"{rid}/request", 0, [accepted(f"in_{rid}")]),
                Append(rid, 0, [done(f"out_{rid}")]),
            ]
        )
    await store.purge(["resp_a", "resp_a/request"])
    await store.purge_objects(["resp_b"])
    assert rows(db_path) == [("in_resp_c", "resp_c"), ("out_resp_c", "resp_c")]


def test_a_migrated_log_indexes_the_events_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "omni.db"
    command.upgrade(alembic_config(str(path)), "0002")  # the schema before the index
    with sqlite3.connect(path) as conn:
        for stream, event in [
            ("resp_a/request", accepted("msg_1", "msg_2")),
            ("resp_a", done("msg_3")),
            ("resp_j/request", NewEvent("omni.request.accepted", "not json")),
            ("chatcmpl-x/request", NewEvent("omni.request.accepted", '{"kind": "chat"}')),
        ]:
            conn.execute(INSERT, (stream, 0, event.type, event.data))
    upgrade(str(path))
    assert rows(path) == [("msg_1", "resp_a"), ("msg_2", "resp_a"), ("msg_3", "resp_a")]


def test_a_lookup_is_one_index_search(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT response_id FROM items WHERE item_id = ? ORDER BY position",
            ("msg_1",),
        ).fetchall()
    assert [step[-1] for step in plan] == ["SEARCH items USING PRIMARY KEY (item_id=?)"]
