"""A transcription whose client went away ends `cancelled` in the `summaries` projection (and
the `transcriptions` view), as a speech request does (0009): its `transcription.failed`
carries the error code `cancelled`. 0008's ending trigger is made again with that status,
and the rows already ended are folded again by the same statement.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

import importlib

from alembic import op

from omni.migrations import pgsql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_0008 = importlib.import_module("omni.migrations.versions.0008_transcriptions")
NAME = "summaries_on_transcription_end"
_OLD = "status = CASE WHEN e.type = 'transcript.text.done' THEN 'completed' ELSE 'failed' END"


def _new(code: str) -> str:
    return (
        "status = CASE WHEN e.type = 'transcript.text.done' THEN 'completed'"
        f" WHEN {code} = 'cancelled' THEN 'cancelled' ELSE 'failed' END"
    )


END = _0008._END.replace(_OLD, _new("json_extract(e.doc, '$.error.code')"))
PG_END = _0008._PG_END.replace(_OLD, _new(pgsql.text("e.doc", "$.error.code")))
assert END != _0008._END and PG_END != _0008._PG_END


def _install(end: str, pg_end: str) -> None:
    if pgsql.is_postgres():
        for statement in pgsql.drop_trigger(NAME) + pgsql.trigger(
            NAME, "INSERT", f"NEW.type IN {_0008._ENDS}", pg_end.replace("{src}", _0008.NEW_PG)
        ):
            op.execute(statement)
        op.execute(pg_end.replace("{src}", pgsql.all_rows(_0008._COLUMNS)))
        return
    op.execute(f"DROP TRIGGER IF EXISTS {NAME}")
    op.execute(
        f"CREATE TRIGGER {NAME} AFTER INSERT ON events WHEN NEW.type IN {_0008._ENDS}"
        f" BEGIN {end.format(src=_0008.NEW_ROW)}; END"
    )
    op.execute(end.format(src=_0008.EVENTS))


def upgrade() -> None:
    _install(END, PG_END)


def downgrade() -> None:
    _install(_0008._END, _0008._PG_END)
