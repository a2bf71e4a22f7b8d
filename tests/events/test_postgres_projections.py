"""The projections PostgreSQL keeps by its own triggers (migrations 0003 and 0004 there): the
item index and the replay-cache index, whoever writes the log (the store, or plain SQL), with
the SQLite triggers' meaning; and the schema made from an empty database, and undone."""

from __future__ import annotations

import json

import psycopg
from alembic import command
from alembic.script import ScriptDirectory

from omni.db import alembic_config, inspect, upgrade
from omni.events import Append, NewEvent
from omni.events.postgres import maintenance as pg_maintenance
from omni.events.postgres.store import PostgresStore
from omni.service.retention import VOCABULARY
from omni.vocabulary import CONVERSATION_DELETED
from tests.postgres import database, rows

from ._helpers import ACCEPTED, USAGE, ev, finished_chat

INSERT = "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (%s, %s, %s, %s, %s)"


def accepted(*ids: str) -> NewEvent:
    items = [{"id": i, "type": "message"} for i in ids]
    return NewEvent(ACCEPTED, json.dumps({"kind": "response", "input": items}))


def done(item_id: str) -> NewEvent:
    return NewEvent("response.output_item.done", json.dumps({"item": {"id": item_id}}))


def items(url: str) -> list[tuple[str, str]]:
    return rows(url, "SELECT item_id, response_id FROM items ORDER BY 1, 2")


def cache(url: str) -> list[tuple[str, str]]:
    return rows(url, "SELECT key, completion_id FROM chat_cache ORDER BY rowid")


async def test_items_are_indexed_by_any_writer_and_leave_with_a_purge(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.append([Append("resp_a/request", 0, [accepted("msg_in", "fc_in")])])
        await store.append([Append("resp_a", 0, [ev("response.created"), done("msg_out")])])
        with psycopg.connect(pg_url) as conn:  # plain SQL indexes the same
            request = json.dumps({"kind": "response", "input": [{"id": "msg_out"}, "text"]})
            conn.execute(INSERT, ("resp_b/request", 0, ACCEPTED, request, 1))
            conn.execute(INSERT, ("resp_c/request", 0, ACCEPTED, '{"input": "a string"}', 1))
            conn.execute(INSERT, ("resp_d/request", 0, ACCEPTED, "not json", 1))  # appended
            conn.execute(INSERT, ("resp_e", 0, "response.output_item.done", '{"item": 3}', 1))
        assert items(pg_url) == [
            ("fc_in", "resp_a"),
            ("msg_in", "resp_a"),
            ("msg_out", "resp_a"),
            ("msg_out", "resp_b"),
        ]
        assert await store.item_holders("msg_out") == ["resp_a", "resp_b"]  # the maker first
        assert await store.purge_objects(["resp_a"]) == 3
        assert items(pg_url) == [("msg_out", "resp_b")]
        (n,) = rows(pg_url, "SELECT count(*) FROM events WHERE stream_id = 'resp_d/request'")
        assert n == (1,)
    finally:
        await store.close()


async def test_the_replay_cache_index_follows_the_log_whoever_writes_it(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.append(finished_chat("chatcmpl-a", "k1"))
        await store.append(finished_chat("chatcmpl-b", "k2", store=False))
        await store.append(finished_chat("chatcmpl-c", "k1", mirror_of="chatcmpl-a"))
        with psycopg.connect(pg_url) as conn:  # a completion written by hand
            request = {"kind": "chat", "body": {"store": True}, "key": "k3"}
            conn.execute(INSERT, ("chatcmpl-d/request", 0, ACCEPTED, json.dumps(request), 5))
            conn.execute(INSERT, ("chatcmpl-d", 0, USAGE, "{}", 6))
        assert cache(pg_url) == [("k1", "chatcmpl-a"), ("k3", "chatcmpl-d")]
        await store.append([Append("chatcmpl-a/request", 1, [ev("omni.completion.deleted")])])
        assert cache(pg_url) == [("k3", "chatcmpl-d")]  # a tombstone removes it
        with psycopg.connect(pg_url) as conn:  # a purge by hand: its request's seq 0 goes
            conn.execute("DELETE FROM events WHERE stream_id = 'chatcmpl-d/request'")
        assert cache(pg_url) == []
        await store.append(finished_chat("chatcmpl-e", "k1"))
        kept = cache(pg_url)
        assert await store.cache.rebuild() == 1 and cache(pg_url) == kept  # as the triggers
    finally:
        await store.close()


def test_a_new_database_is_made_whole_and_undone_whole() -> None:
    with database("omni_migrate") as url:
        assert inspect(url) is None  # no tables: no log yet
        upgrade(url)
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        assert head is not None and inspect(url) == head
        upgrade(url)  # twice: nothing to do
        for view in ("responses", "chat_completions", "timeline", "embeddings", "leases"):
            assert rows(url, f"SELECT count(*) FROM {view}") == [(0,)]
        (kind,) = rows(
            url,
            "SELECT data_type FROM information_schema.columns WHERE column_name = 'position'"
            " AND table_name = 'events'",
        )
        assert kind == ("bigint",)
        command.downgrade(alembic_config(url), "base")
        left = rows(
            url,
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname NOT LIKE 'alembic_version%'",
        )
        functions = rows(
            url,
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema()",
        )
        assert left == [(0,)] and functions == [(0,)]
        upgrade(url)
        assert inspect(url) == head


def test_a_database_of_another_program_is_refused_untouched() -> None:
    import pytest

    from omni.errors import UnusableDatabase

    with database("omni_foreign") as url:
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE invoices (id int)")
        with pytest.raises(UnusableDatabase, match="not an Omni log"):
            upgrade(url)
        assert rows(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(1,)]


def test_retention_finds_a_deleted_conversation_as_sqlite_does(pg_url: str) -> None:
    """PostgreSQL's `finished`: a conversation deleted long ago is a deleted object; one kept
    or deleted today is not; responses end as before."""
    old, now = 1_000, 10_000_000
    with psycopg.connect(pg_url) as conn:
        for cid, deleted in (("conv_gone", old), ("conv_kept", None), ("conv_new", now)):
            conn.execute(INSERT, (f"{cid}/request", 0, ACCEPTED, "{}", old))
            conn.execute(INSERT, (cid, 0, "omni.conversation.item.added", "{}", old))
            if deleted is not None:
                conn.execute(INSERT, (f"{cid}/request", 1, CONVERSATION_DELETED, "{}", deleted))
        conn.execute(INSERT, ("resp_a/request", 0, ACCEPTED, "{}", old))
        conn.execute(INSERT, ("resp_a", 0, "response.completed", '{"response": {}}', old))
    with pg_maintenance.opened(pg_url) as engine, engine.connect() as conn:
        found = pg_maintenance.finished(conn, VOCABULARY, now - 1)
    assert {f.id: f.status for f in found} == {"conv_gone": "deleted", "resp_a": "completed"}
