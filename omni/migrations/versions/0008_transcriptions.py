"""Transcriptions (and translations) in the `summaries` projection, and a view
`transcriptions` over them.

0005's triggers give a transcription its row when it is accepted (kind `transcription`, from
its request); this one names the model that heard it (from `transcription.in_progress`) and
ends it: status, tokens heard (the audio's) and written, an error. Kept by triggers on
`events` in the transaction of the event, folded here over the events already in the log by
the same statements. On PostgreSQL the same, as 0006 does it (omni/migrations/pgsql.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from omni.migrations import pgsql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_DOC = "CASE WHEN json_valid({0}data) THEN {0}data END AS doc"
_COLUMNS = "position, stream_id, seq, type, created_at"
NEW_ROW = (
    "(SELECT " + ", ".join(f"NEW.{c} AS {c}" for c in _COLUMNS.split(", ")) + ", "
    f"{_DOC.format('NEW.')})"
)
EVENTS = f"(SELECT {_COLUMNS}, {_DOC.format('')} FROM events)"
START = "transcription.in_progress"
ENDS = ("transcript.text.done", "transcription.failed")
_ENDS = "(" + ", ".join(f"'{t}'" for t in ENDS) + ")"
_NAMES = ("summaries_on_transcription_start", "summaries_on_transcription_end")


def _j(path: str) -> str:
    return f"json_extract(e.doc, '{path}')"


_START = f"""
UPDATE summaries SET model = coalesce({_j("$.model")}, model)
FROM {{src}} AS e
WHERE e.type = '{START}' AND summaries.id = e.stream_id
"""
_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE WHEN e.type = 'transcript.text.done' THEN 'completed' ELSE 'failed' END,
    input_tokens = {_j("$.usage.input_tokens")},
    output_tokens = {_j("$.usage.output_tokens")},
    error_code = {_j("$.error.code")},
    error_message = {_j("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_ENDS} AND summaries.id = e.stream_id
"""
TRIGGERS = [
    f"CREATE TRIGGER {_NAMES[0]} AFTER INSERT ON events WHEN NEW.type = '{START}'"
    f" BEGIN {_START.format(src=NEW_ROW)}; END",
    f"CREATE TRIGGER {_NAMES[1]} AFTER INSERT ON events WHEN NEW.type IN {_ENDS}"
    f" BEGIN {_END.format(src=NEW_ROW)}; END",
]
REBUILD = [_START.format(src=EVENTS), _END.format(src=EVENTS)]  # after 0005's REBUILD

_ISO = "strftime('%Y-%m-%dT%H:%M:%S', {0} / 1000, 'unixepoch') || printf('.%03dZ', {0} % 1000)"
_REQUEST = "(SELECT {0} FROM events r WHERE r.stream_id = s.id || '/request' AND r.seq = 0{1})"
_TEXT = "(SELECT {0} FROM events t WHERE t.position = s.end_position{1})"
VIEW = f"""CREATE VIEW transcriptions AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {_ISO.format("s.finished_at")} END AS finished,
    {_REQUEST.format("json_extract(r.data, '$.task')", " AND json_valid(r.data)")} AS task,
    {_REQUEST.format("json_extract(r.data, '$.audio.seconds')", " AND json_valid(r.data)")}
        AS audio_seconds,
    {_REQUEST.format("json_extract(r.data, '$.audio.bytes')", " AND json_valid(r.data)")}
        AS audio_bytes,
    {_TEXT.format("json_extract(t.data, '$.text')", " AND json_valid(t.data)")} AS text,
    s.input_tokens, s.output_tokens, s.finished_at - s.created_at AS total_ms,
    s.error_code, s.error_message, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'transcription'"""


def _pj(path: str) -> str:
    return pgsql.text("e.doc", path)


_PG_START = f"""
UPDATE summaries SET model = coalesce({_pj("$.model")}, model)
FROM {{src}} AS e
WHERE e.type = '{START}' AND summaries.id = e.stream_id
"""
_PG_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE WHEN e.type = 'transcript.text.done' THEN 'completed' ELSE 'failed' END,
    input_tokens = {pgsql.num("e.doc", "$.usage.input_tokens")},
    output_tokens = {pgsql.num("e.doc", "$.usage.output_tokens")},
    error_code = {_pj("$.error.code")},
    error_message = {_pj("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_ENDS} AND summaries.id = e.stream_id
"""
NEW_PG = pgsql.new_row(_COLUMNS)
_PG_WHEN = (f"NEW.type = '{START}'", f"NEW.type IN {_ENDS}")
PG_TRIGGERS = [
    statement
    for name, when, sql in zip(_NAMES, _PG_WHEN, (_PG_START, _PG_END), strict=True)
    for statement in pgsql.trigger(name, "INSERT", when, sql.replace("{src}", NEW_PG))
]
PG_REBUILD = [sql.replace("{src}", pgsql.all_rows(_COLUMNS)) for sql in (_PG_START, _PG_END)]
_PG_REQUEST = "(SELECT {0} FROM events r WHERE r.stream_id = s.id || '/request' AND r.seq = 0)"
# Numbers as SQLite's json_extract gives them: seconds a real, bytes an integer.
PG_VIEW = f"""CREATE VIEW transcriptions AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {pgsql.iso("s.finished_at")} END AS finished,
    {_PG_REQUEST.format(pgsql.text("omni_json(r.data)", "$.task"))} AS task,
    {_PG_REQUEST.format("(omni_json(r.data) #>> '{audio,seconds}')::double precision")}
        AS audio_seconds,
    {_PG_REQUEST.format(pgsql.num("omni_json(r.data)", "$.audio.bytes"))} AS audio_bytes,
    (SELECT {pgsql.text("omni_json(t.data)", "$.text")} FROM events t
     WHERE t.position = s.end_position) AS text,
    s.input_tokens, s.output_tokens, s.finished_at - s.created_at AS total_ms,
    s.error_code, s.error_message, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind = 'transcription'"""


def upgrade() -> None:
    if pgsql.is_postgres():
        for statement in PG_TRIGGERS + PG_REBUILD + [PG_VIEW]:
            op.execute(statement)
        return
    for statement in TRIGGERS + REBUILD + [VIEW]:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS transcriptions")
    for name in _NAMES:
        if pgsql.is_postgres():
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
