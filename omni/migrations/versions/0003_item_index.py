"""Which responses hold an item: the index `item_reference` inputs are resolved by.

A projection of the log, kept by SQLite itself in the transaction of the event that changes
it, whichever connection writes: a response's accepted request indexes its input items, each
`response.output_item.done` its item, and deleting those events (a purge, retention) deletes
their rows. The events already there are indexed here, by the same selects. On PostgreSQL
the same, by plpgsql triggers (an `input` that is not an array indexes nothing there).

Revision ID: 0003_items
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omni.migrations import pgsql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# What an event `e` indexes: (item_id, position, response_id). An accepted request's stream is
# 'resp_X/request' (a suffix of 8 characters) and its input items all have ids; a chat
# completion's has no `input`, so it indexes nothing. `e.doc` is its data if that is JSON,
# else NULL (which indexes nothing): a row that is not JSON must not make its append fail.
INPUTS = """
    SELECT i.id, i.position, substr(i.stream_id, 1, length(i.stream_id) - 8) FROM (
        SELECT CASE j.type WHEN 'object' THEN json_extract(j.value, '$.id') END AS id,
               e.position, e.stream_id
        FROM {events} AS e, json_each(e.doc, '$.input') AS j
        WHERE e.type = 'omni.request.accepted'
    ) AS i WHERE i.id IS NOT NULL
"""
OUTPUT = """
    SELECT i.id, i.position, i.stream_id FROM (
        SELECT json_extract(e.doc, '$.item.id') AS id, e.position, e.stream_id
        FROM {events} AS e WHERE e.type = 'response.output_item.done'
    ) AS i WHERE i.id IS NOT NULL
"""
_DOC = "CASE WHEN json_valid({0}data) THEN {0}data END AS doc"
EVENTS = f"(SELECT position, stream_id, type, {_DOC.format('')} FROM events)"
NEW_ROW = (  # in a trigger, the new row is the one event to index
    "(SELECT NEW.position AS position, NEW.stream_id AS stream_id, NEW.type AS type, "
    f"{_DOC.format('NEW.')})"
)

PG_INPUTS = """
    SELECT i.id, i.position, substr(i.stream_id, 1, length(i.stream_id) - 8) FROM (
        SELECT CASE jsonb_typeof(j.value) WHEN 'object' THEN j.value ->> 'id' END AS id,
               e.position, e.stream_id
        FROM {events} AS e, jsonb_array_elements(omni_array(e.doc -> 'input')) AS j
        WHERE e.type = 'omni.request.accepted'
    ) AS i WHERE i.id IS NOT NULL
"""
PG_OUTPUT = """
    SELECT i.id, i.position, i.stream_id FROM (
        SELECT e.doc -> 'item' ->> 'id' AS id, e.position, e.stream_id
        FROM {events} AS e WHERE e.type = 'response.output_item.done'
    ) AS i WHERE i.id IS NOT NULL
"""
PG_COLUMNS = "position, stream_id, type"
PG_NAMES = ("items_of_input", "items_of_output", "items_gone")


def upgrade() -> None:
    op.create_table(
        "items",
        sa.Column("item_id", sa.Text, primary_key=True),
        sa.Column("position", pgsql.BIG, primary_key=True),  # of the event holding it
        sa.Column("response_id", sa.Text, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_items_position", "items", ["position"])
    if pgsql.is_postgres():
        _upgrade_postgres()
        return
    for name, select, type_ in (
        ("items_of_input", INPUTS, "omni.request.accepted"),
        ("items_of_output", OUTPUT, "response.output_item.done"),
    ):
        op.execute(
            f"CREATE TRIGGER {name} AFTER INSERT ON events WHEN NEW.type = '{type_}' BEGIN"
            f" INSERT OR IGNORE INTO items {select.format(events=NEW_ROW)}; END"
        )
    op.execute(
        "CREATE TRIGGER items_gone AFTER DELETE ON events"
        " WHEN OLD.type IN ('omni.request.accepted', 'response.output_item.done') BEGIN"
        " DELETE FROM items WHERE position = OLD.position; END"
    )
    for select in (INPUTS, OUTPUT):
        op.execute(f"INSERT OR IGNORE INTO items {select.format(events=EVENTS)}")


def _upgrade_postgres() -> None:
    into = "INSERT INTO items (item_id, position, response_id)"
    new, every = pgsql.new_row(PG_COLUMNS), pgsql.all_rows(PG_COLUMNS)
    for name, select, type_ in (
        ("items_of_input", PG_INPUTS, "omni.request.accepted"),
        ("items_of_output", PG_OUTPUT, "response.output_item.done"),
    ):
        body = f"{into} {select.format(events=new)} ON CONFLICT DO NOTHING"
        for statement in pgsql.trigger(name, "INSERT", f"NEW.type = '{type_}'", body):
            op.execute(statement)
    gone = "OLD.type IN ('omni.request.accepted', 'response.output_item.done')"
    for statement in pgsql.trigger(
        "items_gone", "DELETE", gone, "DELETE FROM items WHERE position = OLD.position"
    ):
        op.execute(statement)
    for select in (PG_INPUTS, PG_OUTPUT):
        op.execute(f"{into} {select.format(events=every)} ON CONFLICT DO NOTHING")


def downgrade() -> None:
    if pgsql.is_postgres():
        for name in PG_NAMES:
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        op.drop_index("ix_items_position", table_name="items")
        op.drop_table("items")
        return
    for name in ("items_gone", "items_of_output", "items_of_input"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index("ix_items_position", table_name="items")
    op.drop_table("items")
