"""The replay-cache index as a projection the database keeps: triggers on the events table
keep `chat_cache` equal to what the log says may be replayed (within the server's bounds),
whoever writes the log: an append, a tombstone, a purge, `sqlite3` by hand. The store's
`cache.rebuild()` makes the same rows from the whole log (a test holds the two equal).

One row per replayable completion (a key answered twice keeps both; a lookup takes the newest),
so deleting one leaves the other answering. (No view: one in the schema keeps SQLite's
integrity_check from finding orphaned pages.) On PostgreSQL the same triggers as plpgsql, and
an explicit `rowid` (an identity) that orders rows as SQLite's own rowid does.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omni.migrations import pgsql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Replayable: a chat completion that ended with its usage chunk, generated (not a copy) for a
# deterministic request (a key) the client asked to store, and not deleted. The tombstone is
# looked for among the stream's own rows (`+d.type`: not through the index of every one).
TRIGGERS = [
    """CREATE TRIGGER chat_cache_on_end AFTER INSERT ON events
WHEN NEW.type = 'chat.completion.usage'
BEGIN
  INSERT OR IGNORE INTO chat_cache (key, completion_id, created_at)
  SELECT json_extract(r.data, '$.key'), NEW.stream_id, NEW.created_at FROM events r
  WHERE r.stream_id = NEW.stream_id || '/request' AND r.seq = 0
    AND r.type = 'omni.request.accepted'
    AND json_extract(r.data, '$.key') IS NOT NULL
    AND json_extract(r.data, '$.mirror_of') IS NULL
    AND json_extract(r.data, '$.body.store') = 1
    AND NOT EXISTS (SELECT 1 FROM events d
                    WHERE d.stream_id = r.stream_id AND +d.type = 'omni.completion.deleted');
END""",
    """CREATE TRIGGER chat_cache_on_tombstone AFTER INSERT ON events
WHEN NEW.type = 'omni.completion.deleted'
BEGIN
  DELETE FROM chat_cache
  WHERE completion_id = substr(NEW.stream_id, 1, length(NEW.stream_id) - length('/request'));
END""",
    # A purge (retention, `omni db purge`, store:false) deletes a stream whole: its seq 0 goes.
    """CREATE TRIGGER chat_cache_on_purge AFTER DELETE ON events
WHEN OLD.seq = 0
BEGIN
  DELETE FROM chat_cache WHERE completion_id = CASE
    WHEN OLD.stream_id LIKE '%/request'
    THEN substr(OLD.stream_id, 1, length(OLD.stream_id) - length('/request'))
    ELSE OLD.stream_id END;
END""",
]
# What the triggers would have made, from the whole log (as the store's cache.rebuild() does).
REBUILD = """
INSERT OR IGNORE INTO chat_cache (key, completion_id, created_at)
SELECT json_extract(r.data, '$.key'), u.stream_id, u.created_at FROM events u, events r
WHERE u.type = 'chat.completion.usage'
  AND r.stream_id = u.stream_id || '/request' AND r.seq = 0
  AND r.type = 'omni.request.accepted'
  AND json_extract(r.data, '$.key') IS NOT NULL
  AND json_extract(r.data, '$.mirror_of') IS NULL
  AND json_extract(r.data, '$.body.store') = 1
  AND NOT EXISTS (SELECT 1 FROM events d
                  WHERE d.stream_id = r.stream_id AND +d.type = 'omni.completion.deleted')
ORDER BY u.position
"""
NAMES = ("chat_cache_on_end", "chat_cache_on_tombstone", "chat_cache_on_purge")

# PostgreSQL: the same triggers. The request is found by the stream's unique index; its data
# read as JSON (NULL where it is not).
_PG_REPLAYABLE = """r.type = 'omni.request.accepted'
    AND r.doc ->> 'key' IS NOT NULL AND r.doc ->> 'mirror_of' IS NULL
    AND omni_int(r.doc #> '{body,store}') = 1
    AND NOT EXISTS (SELECT 1 FROM events d
                    WHERE d.stream_id = r.stream_id AND d.type = 'omni.completion.deleted')"""
_PG_REQUEST = "(SELECT stream_id, type, omni_json(data) AS doc FROM events WHERE seq = 0)"
_PG_OWNER = "substr({0}.stream_id, 1, length({0}.stream_id) - length('/request'))"
PG_TRIGGERS = [
    (
        "chat_cache_on_end",
        "INSERT",
        "NEW.type = 'chat.completion.usage'",
        "INSERT INTO chat_cache (key, completion_id, created_at)"
        f" SELECT r.doc ->> 'key', NEW.stream_id, NEW.created_at FROM {_PG_REQUEST} AS r"
        f" WHERE r.stream_id = NEW.stream_id || '/request' AND {_PG_REPLAYABLE}"
        " ON CONFLICT DO NOTHING",
    ),
    (
        "chat_cache_on_tombstone",
        "INSERT",
        "NEW.type = 'omni.completion.deleted'",
        f"DELETE FROM chat_cache WHERE completion_id = {_PG_OWNER.format('NEW')}",
    ),
    (
        "chat_cache_on_purge",
        "DELETE",
        "OLD.seq = 0",
        "DELETE FROM chat_cache WHERE completion_id = CASE WHEN OLD.stream_id LIKE '%/request'"
        f" THEN {_PG_OWNER.format('OLD')} ELSE OLD.stream_id END",
    ),
]
PG_REBUILD = f"""
INSERT INTO chat_cache (key, completion_id, created_at)
SELECT r.doc ->> 'key', u.stream_id, u.created_at FROM events u, {_PG_REQUEST} AS r
WHERE u.type = 'chat.completion.usage' AND r.stream_id = u.stream_id || '/request'
  AND {_PG_REPLAYABLE}
ORDER BY u.position
ON CONFLICT DO NOTHING
"""


def upgrade() -> None:
    # The old index (one row per key, written by the service) is replaced, rebuilt from the log.
    op.drop_index("ix_chat_cache_created_at", table_name="chat_cache")
    op.drop_table("chat_cache")
    postgres = pgsql.is_postgres()
    op.create_table(
        "chat_cache",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("completion_id", sa.Text, primary_key=True),
        sa.Column("created_at", pgsql.BIG, nullable=False),
        *([sa.Column("rowid", sa.BigInteger, sa.Identity(), nullable=False)] if postgres else []),
    )
    op.create_index("ix_chat_cache_key", "chat_cache", ["key", "created_at"])
    op.create_index("ix_chat_cache_created_at", "chat_cache", ["created_at"])
    if postgres:
        for name, on, when, body in PG_TRIGGERS:
            for statement in pgsql.trigger(name, on, when, body):
                op.execute(statement)
        op.execute(PG_REBUILD)
        return
    for trigger in TRIGGERS:
        op.execute(trigger)
    op.execute(REBUILD)


def downgrade() -> None:
    for name in NAMES:
        if pgsql.is_postgres():
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        else:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_index("ix_chat_cache_created_at", table_name="chat_cache")
    op.drop_index("ix_chat_cache_key", table_name="chat_cache")
    op.drop_table("chat_cache")
    op.create_table(  # as 0002 made it; the older server rebuilds an empty index from the log
        "chat_cache",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("completion_id", sa.Text, nullable=False),
        sa.Column("created_at", pgsql.BIG, nullable=False),
    )
    op.create_index("ix_chat_cache_created_at", "chat_cache", ["created_at"])
