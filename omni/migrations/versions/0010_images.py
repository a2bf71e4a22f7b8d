"""Image generations in the `summaries` projection, and a view `images` over them.

0005's triggers give an image generation its row when it is accepted (kind `image`, from its
request); this one ends it, as 0009 ends a speech: status (`cancelled` where its client went
away first), the model that drew, input and output tokens (the prompt's; the latent patches
drawn), when it started, an error. The view adds what the request and the ending say: size,
quality, steps, seed, how many images were asked for and drawn, their format and bytes. Kept
by a trigger on `events` in the transaction of the ending, and folded here over the events
already in the log by the same statement; on PostgreSQL the same (omni/migrations/pgsql.py).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

from omni.migrations import pgsql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_DOC = "CASE WHEN json_valid({0}data) THEN {0}data END AS doc"
_COLUMNS = "position, stream_id, seq, type, created_at"
NEW_ROW = (
    "(SELECT " + ", ".join(f"NEW.{c} AS {c}" for c in _COLUMNS.split(", ")) + ", "
    f"{_DOC.format('NEW.')})"
)
EVENTS = f"(SELECT {_COLUMNS}, {_DOC.format('')} FROM events)"
ENDS = ("images.completed", "images.failed")
_ENDS = "(" + ", ".join(f"'{t}'" for t in ENDS) + ")"


def _j(path: str) -> str:
    return f"json_extract(e.doc, '{path}')"


_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE WHEN e.type = 'images.completed' THEN 'completed'
        WHEN {_j("$.error.code")} = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
    model = coalesce({_j("$.model")}, model),
    started_at = coalesce({_j("$.timings.started_at")}, started_at),
    input_tokens = {_j("$.usage.input_tokens")},
    output_tokens = {_j("$.usage.output_tokens")},
    error_code = {_j("$.error.code")},
    error_message = {_j("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_ENDS} AND summaries.id = e.stream_id
"""
TRIGGER = (
    f"CREATE TRIGGER summaries_on_images_end AFTER INSERT ON events WHEN NEW.type IN {_ENDS}"
    f" BEGIN {_END.format(src=NEW_ROW)}; END"
)
REBUILD = [_END.format(src=EVENTS)]  # after 0005's REBUILD, whose rows it ends

_ISO = "strftime('%Y-%m-%dT%H:%M:%S', {0} / 1000, 'unixepoch') || printf('.%03dZ', {0} % 1000)"
_REQUEST = "(SELECT json_extract(r.data, '{0}') FROM events r WHERE r.stream_id = s.id || "
_REQUEST += "'/request' AND r.seq = 0 AND json_valid(r.data))"
_ENDING = "(SELECT json_extract(t.data, '{0}') FROM events t WHERE t.position = s.end_position"
_ENDING += " AND json_valid(t.data))"
VIEW = f"""CREATE VIEW images AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {_ISO.format("s.finished_at")} END AS finished,
    {_REQUEST.format("$.size")} AS size,
    {_REQUEST.format("$.quality")} AS quality,
    {_REQUEST.format("$.steps")} AS steps,
    {_REQUEST.format("$.seed")} AS seed,
    coalesce({_REQUEST.format("$.body.n")}, 1) AS n,
    coalesce({_REQUEST.format("$.body.output_format")}, 'png') AS output_format,
    {_REQUEST.format("$.prompt_chars")} AS prompt_chars,
    {_ENDING.format("$.images")} AS images, {_ENDING.format("$.bytes")} AS bytes,
    s.input_tokens, s.output_tokens,
    s.started_at - s.created_at AS queued_ms, s.finished_at - s.created_at AS total_ms,
    s.error_code, s.error_message, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'image'"""


def _pj(path: str) -> str:
    return pgsql.text("e.doc", path)


_PG_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE WHEN e.type = 'images.completed' THEN 'completed'
        WHEN {_pj("$.error.code")} = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
    model = coalesce({_pj("$.model")}, model),
    started_at = coalesce({pgsql.num("e.doc", "$.timings.started_at")}, started_at),
    input_tokens = {pgsql.num("e.doc", "$.usage.input_tokens")},
    output_tokens = {pgsql.num("e.doc", "$.usage.output_tokens")},
    error_code = {_pj("$.error.code")},
    error_message = {_pj("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_ENDS} AND summaries.id = e.stream_id
"""
PG_TRIGGER = pgsql.trigger(
    "summaries_on_images_end",
    "INSERT",
    f"NEW.type IN {_ENDS}",
    _PG_END.replace("{src}", pgsql.new_row(_COLUMNS)),
)
PG_REBUILD = [_PG_END.replace("{src}", pgsql.all_rows(_COLUMNS))]
_PG_REQUEST = "(SELECT omni_json(r.data) {0} FROM events r WHERE r.stream_id = s.id || "
_PG_REQUEST += "'/request' AND r.seq = 0)"
_PG_ENDING = "(SELECT omni_json(t.data) {0} FROM events t WHERE t.position = s.end_position)"
# Numbers as SQLite's json_extract gives them: integers.
PG_VIEW = f"""CREATE VIEW images AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {pgsql.iso("s.finished_at")} END AS finished,
    {_PG_REQUEST.format("->> 'size'")} AS size,
    {_PG_REQUEST.format("->> 'quality'")} AS quality,
    omni_int({_PG_REQUEST.format("-> 'steps'")}) AS steps,
    omni_int({_PG_REQUEST.format("-> 'seed'")}) AS seed,
    coalesce(omni_int({_PG_REQUEST.format("#> '{body,n}'")}), 1) AS n,
    coalesce({_PG_REQUEST.format("#>> '{body,output_format}'")}, 'png') AS output_format,
    omni_int({_PG_REQUEST.format("-> 'prompt_chars'")}) AS prompt_chars,
    omni_int({_PG_ENDING.format("-> 'images'")}) AS images,
    omni_int({_PG_ENDING.format("-> 'bytes'")}) AS bytes,
    s.input_tokens, s.output_tokens,
    s.started_at - s.created_at AS queued_ms, s.finished_at - s.created_at AS total_ms,
    s.error_code, s.error_message, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'image'"""


def upgrade() -> None:
    if pgsql.is_postgres():
        for statement in PG_TRIGGER + PG_REBUILD + [PG_VIEW]:
            op.execute(statement)
        return
    op.execute(TRIGGER)
    for statement in REBUILD:
        op.execute(statement)
    op.execute(VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS images")
    if pgsql.is_postgres():
        for statement in pgsql.drop_trigger("summaries_on_images_end"):
            op.execute(statement)
        return
    op.execute("DROP TRIGGER IF EXISTS summaries_on_images_end")
