"""Conversations in the `summaries` projection, and a view `conversations` over them.

0005's triggers give a conversation its row when it is created (kind `conversation`, from its
`conv_X/request`); a conversation runs nothing, so this one makes its status `completed` at
once and marks it deleted at its tombstone. Its first statement inserts the row itself where
0005's has not yet (triggers on one event fire in no order one may count on), then sets the
status: either way the row ends the same. The view adds what the log says: how many items it
holds (added less deleted) and how many responses' turns added theirs. Its metadata is read
through the API (a JSON column would not read the same on both backends).
Kept by triggers on `events`, and folded here over the events already in the log by the same
statements; on PostgreSQL the same (omni/migrations/pgsql.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from omni.migrations import pgsql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_DOC = "CASE WHEN json_valid({0}data) THEN {0}data END AS doc"
_COLUMNS = "position, stream_id, seq, type, created_at"
NEW_ROW = (
    "(SELECT " + ", ".join(f"NEW.{c} AS {c}" for c in _COLUMNS.split(", ")) + ", "
    f"{_DOC.format('NEW.')})"
)
EVENTS = f"(SELECT {_COLUMNS}, {_DOC.format('')} FROM events)"
_OWNER = "substr(e.stream_id, 1, length(e.stream_id) - 8)"  # 'X/request' → 'X'
ACCEPTED = "omni.request.accepted"
DELETED = "omni.conversation.deleted"
ADDED = "omni.conversation.item.added"
ITEM_DELETED = "omni.conversation.item.deleted"
_CREATED = (
    f"e.type = '{ACCEPTED}' AND e.seq = 0 AND e.stream_id LIKE 'conv\\_%/request' ESCAPE '\\'"
)

_INSERT = f"""
INSERT OR IGNORE INTO summaries (id, kind, position, created_at, created, owner, background,
    store, status, started_at, finished_at)
SELECT {_OWNER}, 'conversation', e.position, e.created_at,
    strftime('%Y-%m-%dT%H:%M:%S', e.created_at / 1000, 'unixepoch')
        || printf('.%03dZ', e.created_at % 1000),
    json_extract(e.doc, '$.owner'), 0, 1, 'completed', e.created_at, e.created_at
FROM {{src}} AS e
WHERE {_CREATED} AND json_extract(e.doc, '$.kind') = 'conversation'
"""
_COMPLETE = f"""
UPDATE summaries SET status = 'completed', started_at = created_at, finished_at = created_at,
    store = 1
WHERE kind = 'conversation' AND id IN (SELECT {_OWNER} FROM {{src}} AS e WHERE {_CREATED})
"""
_DELETE = f"""
UPDATE summaries SET deleted = 1
WHERE id IN (SELECT {_OWNER} FROM {{src}} AS e WHERE e.type = '{DELETED}')
"""
# Fired only by a conversation's own events: not a statement's work for every request.
_ONLY = "AND NEW.stream_id LIKE 'conv\\_%' ESCAPE '\\'"
_PG_ONLY = "AND NEW.stream_id LIKE 'conv\\_%'"
STATEMENTS = {  # trigger name → (the type it fires on, its statements), in rebuild order
    "summaries_on_conversation": (ACCEPTED, [_INSERT, _COMPLETE]),
    "summaries_on_conversation_delete": (DELETED, [_DELETE]),
}
TRIGGERS = [
    f"CREATE TRIGGER {name} AFTER INSERT ON events WHEN NEW.type = '{type_}' {_ONLY} BEGIN "
    + "; ".join(sql.format(src=NEW_ROW) for sql in statements)
    + "; END"
    for name, (type_, statements) in STATEMENTS.items()
]
REBUILD = [sql.format(src=EVENTS) for _, statements in STATEMENTS.values() for sql in statements]

_COUNT = "(SELECT count(*) FROM events i WHERE i.stream_id = s.id AND i.type = '{0}')"
VIEW = f"""CREATE VIEW conversations AS SELECT
    s.id, s.created,
    {_COUNT.format(ADDED)} - {_COUNT.format(ITEM_DELETED)} AS items,
    (SELECT count(DISTINCT json_extract(i.data, '$.response_id')) FROM events i
     WHERE i.stream_id = s.id AND i.type = '{ADDED}' AND json_valid(i.data)) AS turns,
    s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'conversation'"""

_PG_CREATED = f"e.type = '{ACCEPTED}' AND e.seq = 0 AND e.stream_id LIKE 'conv\\_%/request'"
_PG_INSERT = f"""
INSERT INTO summaries (id, kind, position, created_at, created, owner, background, store,
    status, started_at, finished_at)
SELECT {_OWNER}, 'conversation', e.position, e.created_at, {pgsql.iso("e.created_at")},
    {pgsql.text("e.doc", "$.owner")}, 0, 1, 'completed', e.created_at, e.created_at
FROM {{src}} AS e
WHERE {_PG_CREATED} AND {pgsql.text("e.doc", "$.kind")} = 'conversation'
ON CONFLICT (id) DO NOTHING
"""
_PG_COMPLETE = _COMPLETE.replace(_CREATED, _PG_CREATED)
PG_STATEMENTS = {
    "summaries_on_conversation": (ACCEPTED, [_PG_INSERT, _PG_COMPLETE]),
    "summaries_on_conversation_delete": (DELETED, [_DELETE]),
}
PG_TRIGGERS = [
    statement
    for name, (type_, statements) in PG_STATEMENTS.items()
    for statement in pgsql.trigger(
        name,
        "INSERT",
        f"NEW.type = '{type_}' {_PG_ONLY}",
        ";\n".join(sql.replace("{src}", pgsql.new_row(_COLUMNS)) for sql in statements),
    )
]
PG_REBUILD = [
    sql.replace("{src}", pgsql.all_rows(_COLUMNS))
    for _, statements in PG_STATEMENTS.values()
    for sql in statements
]
PG_VIEW = f"""CREATE VIEW conversations AS SELECT
    s.id, s.created,
    {_COUNT.format(ADDED)} - {_COUNT.format(ITEM_DELETED)} AS items,
    (SELECT count(DISTINCT omni_json(i.data) ->> 'response_id') FROM events i
     WHERE i.stream_id = s.id AND i.type = '{ADDED}') AS turns,
    s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'conversation'"""


def upgrade() -> None:
    if pgsql.is_postgres():
        for statement in PG_TRIGGERS + PG_REBUILD + [PG_VIEW]:
            op.execute(statement)
        return
    for statement in TRIGGERS + REBUILD + [VIEW]:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS conversations")
    for name in STATEMENTS:
        if pgsql.is_postgres():
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
