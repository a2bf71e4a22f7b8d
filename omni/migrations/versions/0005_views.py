"""The log made readable: views `responses`, `chat_completions` and `timeline`, and the
projection `summaries` (one row per response or completion) that keeps the first two fast.

`summaries` is kept by SQLite itself, by triggers on `events`, in the transaction of the
event that changes it, whoever writes the log; the events already there are folded into it
here by the same statements (each is written once over a source of events: the new row in a
trigger, the whole log in the rebuild). Dropping it loses nothing the log does not hold.
On PostgreSQL (omni/migrations/pgsql.py) the same statements, triggers and views, read
through jsonb: the views' columns and values are the same (tests/inspect/test_postgres.py).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from omni.migrations import pgsql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def iso(ms: str) -> str:
    """Unix ms → '2026-12-02T07:51:35.815Z' (integer arithmetic: no float rounding)."""
    return (
        f"strftime('%Y-%m-%dT%H:%M:%S', {ms} / 1000, 'unixepoch') || printf('.%03dZ', {ms} % 1000)"
    )


# `e.doc` is an event's data if that is JSON, else NULL: a row that is not JSON must not
# make its append fail. A source is the new row (in a trigger) or every event (the rebuild).
_DOC = "CASE WHEN json_valid({0}data) THEN {0}data END AS doc"
_COLUMNS = "position, stream_id, seq, type, created_at"
NEW_ROW = (
    "(SELECT " + ", ".join(f"NEW.{c} AS {c}" for c in _COLUMNS.split(", ")) + ", "
    f"{_DOC.format('NEW.')})"
)
EVENTS = f"(SELECT {_COLUMNS}, {_DOC.format('')} FROM events)"
_OWNER = "substr(e.stream_id, 1, length(e.stream_id) - 8)"  # 'X/request' → 'X'

ACCEPTED = ("omni.request.accepted",)
STARTED = ("response.in_progress",)
FIRST = ("response.output_item.added", "chat.completion.chunk", "text_completion.chunk")
TERMINAL = ("response.completed", "response.failed", "response.incomplete")
CHAT_END = (
    "chat.completion.usage",
    "text_completion.usage",
    "completion.error",
    "completion.cancelled",
)
DELETED = ("omni.response.deleted", "omni.completion.deleted")


def _in(types: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{t}'" for t in types) + ")"


def _j(path: str) -> str:
    return f"json_extract(e.doc, '{path}')"


# A request accepted: its object's row. A chat request has no `response`, a foreground
# response starts at once, a background one is queued.
_ACCEPT = f"""
INSERT OR IGNORE INTO summaries (id, kind, position, created_at, created, owner, model,
    background, store, previous_response_id, mirror_of, status, started_at)
SELECT {_OWNER},
    CASE {_j("$.kind")} WHEN 'chat' THEN 'chat.completion' WHEN 'text' THEN 'text_completion'
        ELSE {_j("$.kind")} END,
    e.position, e.created_at, {iso("e.created_at")}, {_j("$.owner")},
    coalesce({_j("$.response.model")}, {_j("$.body.model")}),
    coalesce({_j("$.response.background")}, 0),
    coalesce({_j("$.response.store")}, {_j("$.body.store")}, 0),
    {_j("$.response.previous_response_id")}, {_j("$.mirror_of")},
    coalesce({_j("$.response.status")}, 'in_progress'),
    CASE WHEN {_j("$.response.status")} = 'queued' THEN NULL ELSE e.created_at END
FROM {{src}} AS e
WHERE e.type = 'omni.request.accepted' AND e.seq = 0 AND e.doc IS NOT NULL
    AND e.stream_id LIKE '%/request'
"""
_START = f"""
UPDATE summaries SET started_at = coalesce(started_at, s.at),
    status = CASE WHEN status = 'queued' THEN 'in_progress' ELSE status END
FROM (SELECT e.stream_id, min(e.created_at) AS at FROM {{src}} AS e
      WHERE e.type IN {_in(STARTED)} GROUP BY e.stream_id) AS s
WHERE summaries.id = s.stream_id
"""
# The first output a client saw: a response's first output item (committed with its first
# token), a chat completion's first chunk after the role chunk, a text completion's first.
_FIRST = f"""
UPDATE summaries SET first_token_at = coalesce(first_token_at, s.at)
FROM (SELECT e.stream_id, min(e.created_at) AS at FROM {{src}} AS e
      WHERE e.type IN {_in(FIRST)}
        AND (e.type = 'response.output_item.added'
             OR e.seq = CASE e.type WHEN 'chat.completion.chunk' THEN 1 ELSE 0 END)
      GROUP BY e.stream_id) AS s
WHERE summaries.id = s.stream_id
"""
_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = coalesce({_j("$.response.status")}, substr(e.type, 10)),
    input_tokens = {_j("$.response.usage.input_tokens")},
    output_tokens = {_j("$.response.usage.output_tokens")},
    cached_tokens = {_j("$.response.usage.input_tokens_details.cached_tokens")},
    reasoning_tokens = {_j("$.response.usage.output_tokens_details.reasoning_tokens")},
    incomplete_reason = {_j("$.response.incomplete_details.reason")},
    error_code = {_j("$.response.error.code")},
    error_message = {_j("$.response.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_in(TERMINAL)} AND summaries.id = e.stream_id
"""
# A completion ends with its usage chunk (after the chunk with finish_reason), an error
# event, or a cancel event that was never sent.
_CHAT_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE e.type WHEN 'completion.error' THEN 'failed'
        WHEN 'completion.cancelled' THEN 'cancelled' ELSE 'completed' END,
    input_tokens = {_j("$.usage.prompt_tokens")},
    output_tokens = {_j("$.usage.completion_tokens")},
    cached_tokens = {_j("$.usage.prompt_tokens_details.cached_tokens")},
    reasoning_tokens = {_j("$.usage.completion_tokens_details.reasoning_tokens")},
    finish_reason = (SELECT json_extract(f.data, '$.choices[0].finish_reason') FROM events f
        WHERE f.stream_id = e.stream_id AND f.seq = e.seq - 1 AND json_valid(f.data)),
    error_code = {_j("$.error.code")},
    error_message = {_j("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_in(CHAT_END)} AND summaries.id = e.stream_id
"""
_DELETE = f"""
UPDATE summaries SET deleted = 1
WHERE id IN (SELECT {_OWNER} FROM {{src}} AS e WHERE e.type IN {_in(DELETED)})
"""
STATEMENTS = {  # trigger name → (the types it fires on, its statement), in rebuild order
    "summaries_on_accept": (ACCEPTED, _ACCEPT),
    "summaries_on_start": (STARTED, _START),
    "summaries_on_first": (FIRST, _FIRST),
    "summaries_on_end": (TERMINAL, _END),
    "summaries_on_chat_end": (CHAT_END, _CHAT_END),
    "summaries_on_delete": (DELETED, _DELETE),
}
# Chunks fire only while seq <= 1: not a trigger's work for every token.
_WHEN = {"summaries_on_first": "AND (NEW.type = 'response.output_item.added' OR NEW.seq <= 1)"}
TRIGGERS = [
    f"CREATE TRIGGER {name} AFTER INSERT ON events WHEN NEW.type IN {_in(types)} "
    f"{_WHEN.get(name, '')} BEGIN {sql.format(src=NEW_ROW)}; END"
    for name, (types, sql) in STATEMENTS.items()
] + [
    # A purge (retention, `omni db purge`, store:false) deletes a stream whole.
    "CREATE TRIGGER summaries_on_purge AFTER DELETE ON events"
    " WHEN OLD.type = 'omni.request.accepted' BEGIN"
    " DELETE FROM summaries WHERE id = substr(OLD.stream_id, 1, length(OLD.stream_id) - 8); END"
]
TRIGGER_NAMES = [*STATEMENTS, "summaries_on_purge"]
REBUILD = ["DELETE FROM summaries"] + [sql.format(src=EVENTS) for _, sql in STATEMENTS.values()]

# The text of a finished response: its message items' output_text parts, in order; of one
# still running: its deltas so far (`+d.type`: through the stream's own rows, not the index
# of every delta).
_OUTPUT_TEXT = """CASE WHEN t.position IS NULL THEN
    (SELECT group_concat(json_extract(d.data, '$.delta'), '') FROM events d
     WHERE d.stream_id = s.id AND +d.type = 'response.output_text.delta')
  ELSE (SELECT group_concat(json_extract(p.value, '$.text'), '')
     FROM json_each(CASE WHEN json_valid(t.data) THEN t.data END, '$.response.output') o,
          json_each(o.value, '$.content') p
     WHERE json_extract(o.value, '$.type') = 'message'
       AND json_extract(p.value, '$.type') = 'output_text') END"""
_CONTENT = """(SELECT group_concat(coalesce(json_extract(c.data, '$.choices[0].delta.content'),
        json_extract(c.data, '$.choices[0].text')), '')
     FROM events c WHERE c.stream_id = s.id
       AND +c.type IN ('chat.completion.chunk', 'text_completion.chunk'))"""
_TIMES = """s.started_at - s.created_at AS queued_ms,
    s.first_token_at - s.created_at AS ttft_ms,
    CASE WHEN s.output_tokens > 1 AND s.finished_at > s.first_token_at
         THEN round((s.output_tokens - 1) * 1000.0 / (s.finished_at - s.first_token_at), 1)
    END AS tokens_per_s,
    s.finished_at - s.created_at AS total_ms"""
_FINISHED = iso("s.finished_at")
VIEWS = [
    f"""CREATE VIEW responses AS SELECT
    s.id, s.status, s.model, s.created, CASE WHEN s.finished_at IS NOT NULL THEN {_FINISHED}
    END AS finished, s.background, s.store, s.previous_response_id,
    s.input_tokens, s.output_tokens, s.cached_tokens, s.reasoning_tokens,
    s.error_code, s.error_message, s.incomplete_reason, {_TIMES},
    {_OUTPUT_TEXT} AS output_text, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s LEFT JOIN events t ON t.position = s.end_position
WHERE s.kind = 'response'""",
    f"""CREATE VIEW chat_completions AS SELECT
    s.id, s.kind AS object, s.model, s.created, CASE WHEN s.finished_at IS NOT NULL
    THEN {_FINISHED} END AS finished, s.status, s.finish_reason,
    s.input_tokens AS prompt_tokens, s.output_tokens AS completion_tokens,
    s.cached_tokens, s.reasoning_tokens, s.store AS stored,
    CASE WHEN s.mirror_of IS NULL THEN 'generated' ELSE 'cache' END AS source,
    s.mirror_of AS replay_of, s.error_code, s.error_message, {_TIMES},
    {_CONTENT} AS content, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind IN ('chat.completion', 'text_completion')""",
    f"""CREATE VIEW timeline AS SELECT
    e.stream_id, e.seq, e.type, {iso("e.created_at")} AS time,
    e.created_at - (SELECT p.created_at FROM events p
                    WHERE p.stream_id = e.stream_id AND p.seq = e.seq - 1) AS ms_since_previous,
    CASE WHEN NOT json_valid(e.data) THEN NULL
         WHEN e.type LIKE '%.delta' THEN json_extract(e.data, '$.delta')
         WHEN e.type = 'chat.completion.chunk'
         THEN coalesce(json_extract(e.data, '$.choices[0].delta.content'),
                       json_extract(e.data, '$.choices[0].delta.reasoning_content'))
         WHEN e.type = 'text_completion.chunk' THEN json_extract(e.data, '$.choices[0].text')
    END AS text,
    e.position, e.created_at AS created_ms
FROM events e""",
]
VIEW_NAMES = ["timeline", "chat_completions", "responses"]


# PostgreSQL: the same statements through jsonb (pgsql.text: a value as text; pgsql.num: as
# an integer, true as 1), the same triggers as plpgsql functions, the same views.
def _pj(path: str) -> str:
    return pgsql.text("e.doc", path)


def _pn(path: str) -> str:
    return pgsql.num("e.doc", path)


PG_COLUMNS = _COLUMNS
# SQLite's OR IGNORE skips a row that breaks NOT NULL too (a request without a kind); ON
# CONFLICT only skips duplicates, so that row is left out by the WHERE here.
_PG_ACCEPT = f"""
INSERT INTO summaries (id, kind, position, created_at, created, owner, model,
    background, store, previous_response_id, mirror_of, status, started_at)
SELECT {_OWNER},
    CASE {_pj("$.kind")} WHEN 'chat' THEN 'chat.completion' WHEN 'text' THEN 'text_completion'
        ELSE {_pj("$.kind")} END,
    e.position, e.created_at, {pgsql.iso("e.created_at")}, {_pj("$.owner")},
    coalesce({_pj("$.response.model")}, {_pj("$.body.model")}),
    coalesce({_pn("$.response.background")}, 0),
    coalesce({_pn("$.response.store")}, {_pn("$.body.store")}, 0),
    {_pj("$.response.previous_response_id")}, {_pj("$.mirror_of")},
    coalesce({_pj("$.response.status")}, 'in_progress'),
    CASE WHEN {_pj("$.response.status")} = 'queued' THEN NULL ELSE e.created_at END
FROM {{src}} AS e
WHERE e.type = 'omni.request.accepted' AND e.seq = 0 AND e.doc IS NOT NULL
    AND e.stream_id LIKE '%/request' AND {_pj("$.kind")} IS NOT NULL
ON CONFLICT DO NOTHING
"""
_PG_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = coalesce({_pj("$.response.status")}, substr(e.type, 10)),
    input_tokens = {_pn("$.response.usage.input_tokens")},
    output_tokens = {_pn("$.response.usage.output_tokens")},
    cached_tokens = {_pn("$.response.usage.input_tokens_details.cached_tokens")},
    reasoning_tokens = {_pn("$.response.usage.output_tokens_details.reasoning_tokens")},
    incomplete_reason = {_pj("$.response.incomplete_details.reason")},
    error_code = {_pj("$.response.error.code")},
    error_message = {_pj("$.response.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_in(TERMINAL)} AND summaries.id = e.stream_id
"""
_PG_FINISH = pgsql.text("omni_json(f.data)", "$.choices[0].finish_reason")
_PG_CHAT_END = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE e.type WHEN 'completion.error' THEN 'failed'
        WHEN 'completion.cancelled' THEN 'cancelled' ELSE 'completed' END,
    input_tokens = {_pn("$.usage.prompt_tokens")},
    output_tokens = {_pn("$.usage.completion_tokens")},
    cached_tokens = {_pn("$.usage.prompt_tokens_details.cached_tokens")},
    reasoning_tokens = {_pn("$.usage.completion_tokens_details.reasoning_tokens")},
    finish_reason = (SELECT {_PG_FINISH} FROM events f
        WHERE f.stream_id = e.stream_id AND f.seq = e.seq - 1),
    error_code = {_pj("$.error.code")},
    error_message = {_pj("$.error.message")}
FROM {{src}} AS e
WHERE e.type IN {_in(CHAT_END)} AND summaries.id = e.stream_id
"""
PG_STATEMENTS = {  # as STATEMENTS; _START, _FIRST and _DELETE read no JSON: the same text
    "summaries_on_accept": (ACCEPTED, _PG_ACCEPT),
    "summaries_on_start": (STARTED, _START),
    "summaries_on_first": (FIRST, _FIRST),
    "summaries_on_end": (TERMINAL, _PG_END),
    "summaries_on_chat_end": (CHAT_END, _PG_CHAT_END),
    "summaries_on_delete": (DELETED, _DELETE),
}
PG_TRIGGERS = [
    (name, "INSERT", f"NEW.type IN {_in(types)} {_WHEN.get(name, '')}", sql)
    for name, (types, sql) in PG_STATEMENTS.items()
] + [
    (
        "summaries_on_purge",
        "DELETE",
        "OLD.type = 'omni.request.accepted'",
        "DELETE FROM summaries WHERE id = substr(OLD.stream_id, 1, length(OLD.stream_id) - 8)",
    )
]
# (`{src}` replaced, not formatted: the JSON paths' literals hold braces.)
PG_REBUILD = ["DELETE FROM summaries"] + [
    sql.replace("{src}", pgsql.all_rows(PG_COLUMNS)) for _, sql in PG_STATEMENTS.values()
]

# The views: string_agg in seq (and array) order, where SQLite's group_concat follows the scan;
# a rate as double precision, as SQLite's round() gives a real.
_PG_DELTA = pgsql.text("omni_json(d.data)", "$.delta")
_PG_OUTPUT_TEXT = f"""CASE WHEN t.position IS NULL THEN
    (SELECT string_agg({_PG_DELTA}, '' ORDER BY d.seq) FROM events d
     WHERE d.stream_id = s.id AND d.type = 'response.output_text.delta')
  ELSE (SELECT string_agg(p.value ->> 'text', '' ORDER BY o.n, p.n)
     FROM jsonb_array_elements(omni_array(omni_json(t.data) #> '{{response,output}}'))
            WITH ORDINALITY AS o(value, n),
          jsonb_array_elements(omni_array(o.value -> 'content')) WITH ORDINALITY AS p(value, n)
     WHERE o.value ->> 'type' = 'message' AND p.value ->> 'type' = 'output_text') END"""
_PG_CHUNK = "omni_json(c.data)"
_PG_CONTENT = f"""(SELECT string_agg(coalesce({pgsql.text("c.doc", "$.choices[0].delta.content")},
        {pgsql.text("c.doc", "$.choices[0].text")}), '' ORDER BY c.seq)
     FROM (SELECT c.seq, {_PG_CHUNK} AS doc FROM events c WHERE c.stream_id = s.id
       AND c.type IN ('chat.completion.chunk', 'text_completion.chunk')) AS c)"""
_PG_TIMES = """s.started_at - s.created_at AS queued_ms,
    s.first_token_at - s.created_at AS ttft_ms,
    CASE WHEN s.output_tokens > 1 AND s.finished_at > s.first_token_at
         THEN round((s.output_tokens - 1) * 1000.0 / (s.finished_at - s.first_token_at), 1)
              ::double precision
    END AS tokens_per_s,
    s.finished_at - s.created_at AS total_ms"""
_PG_FINISHED = pgsql.iso("s.finished_at")
_PG_TEXT = {
    path: pgsql.text("omni_json(e.data)", path)
    for path in (
        "$.delta",
        "$.choices[0].delta.content",
        "$.choices[0].delta.reasoning_content",
        "$.choices[0].text",
    )
}
PG_VIEWS = [
    f"""CREATE VIEW responses AS SELECT
    s.id, s.status, s.model, s.created, CASE WHEN s.finished_at IS NOT NULL THEN {_PG_FINISHED}
    END AS finished, s.background, s.store, s.previous_response_id,
    s.input_tokens, s.output_tokens, s.cached_tokens, s.reasoning_tokens,
    s.error_code, s.error_message, s.incomplete_reason, {_PG_TIMES},
    {_PG_OUTPUT_TEXT} AS output_text, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s LEFT JOIN events t ON t.position = s.end_position
WHERE s.kind = 'response'""",
    f"""CREATE VIEW chat_completions AS SELECT
    s.id, s.kind AS object, s.model, s.created, CASE WHEN s.finished_at IS NOT NULL
    THEN {_PG_FINISHED} END AS finished, s.status, s.finish_reason,
    s.input_tokens AS prompt_tokens, s.output_tokens AS completion_tokens,
    s.cached_tokens, s.reasoning_tokens, s.store AS stored,
    CASE WHEN s.mirror_of IS NULL THEN 'generated' ELSE 'cache' END AS source,
    s.mirror_of AS replay_of, s.error_code, s.error_message, {_PG_TIMES},
    {_PG_CONTENT} AS content, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s
WHERE s.kind IN ('chat.completion', 'text_completion')""",
    f"""CREATE VIEW timeline AS SELECT
    e.stream_id, e.seq, e.type, {pgsql.iso("e.created_at")} AS time,
    e.created_at - (SELECT p.created_at FROM events p
                    WHERE p.stream_id = e.stream_id AND p.seq = e.seq - 1) AS ms_since_previous,
    CASE WHEN e.type LIKE '%.delta' THEN {_PG_TEXT["$.delta"]}
         WHEN e.type = 'chat.completion.chunk'
         THEN coalesce({_PG_TEXT["$.choices[0].delta.content"]},
                       {_PG_TEXT["$.choices[0].delta.reasoning_content"]})
         WHEN e.type = 'text_completion.chunk' THEN {_PG_TEXT["$.choices[0].text"]}
    END AS text,
    e.position, e.created_at AS created_ms
FROM events e""",
]


def upgrade() -> None:
    big = pgsql.BIG  # unix ms and positions (SQLite's DDL as it was)
    op.create_table(
        "summaries",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("position", big, nullable=False),  # of the accepted request
        sa.Column("created_at", big, nullable=False),  # unix ms
        sa.Column("created", sa.Text, nullable=False),  # the same, ISO-8601 UTC
        sa.Column("owner", sa.Text),
        sa.Column("model", sa.Text),
        sa.Column("background", big),
        sa.Column("store", big),
        sa.Column("previous_response_id", sa.Text),
        sa.Column("mirror_of", sa.Text),  # a chat completion served from the replay cache
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("started_at", big),  # unix ms: off the queue
        sa.Column("first_token_at", big),  # unix ms: the first output committed
        sa.Column("finished_at", big),  # unix ms: the terminal event
        sa.Column("end_position", big),  # of the terminal event
        sa.Column("input_tokens", big),
        sa.Column("output_tokens", big),
        sa.Column("cached_tokens", big),
        sa.Column("reasoning_tokens", big),
        sa.Column("finish_reason", sa.Text),
        sa.Column("incomplete_reason", sa.Text),
        sa.Column("error_code", sa.Text),
        sa.Column("error_message", sa.Text),
        sa.Column("deleted", big, nullable=False, server_default="0"),
    )
    op.create_index("ix_summaries_position", "summaries", ["position"], unique=True)
    op.create_index("ix_summaries_kind_created", "summaries", ["kind", "created"])
    op.create_index("ix_summaries_created_at", "summaries", ["created_at"])
    if pgsql.is_postgres():
        for name, on, when, body in PG_TRIGGERS:
            for statement in pgsql.trigger(name, on, when, body.replace("{src}", _pg_source(on))):
                op.execute(statement)
        for statement in PG_REBUILD + PG_VIEWS:
            op.execute(statement)
        return
    for trigger in TRIGGERS:
        op.execute(trigger)
    for statement in REBUILD:
        op.execute(statement)
    for view in VIEWS:
        op.execute(view)


def _pg_source(on: str) -> str:
    return pgsql.new_row(PG_COLUMNS) if on == "INSERT" else ""


def downgrade() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name in TRIGGER_NAMES:
        if pgsql.is_postgres():
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index("ix_summaries_created_at", table_name="summaries")
    op.drop_index("ix_summaries_kind_created", table_name="summaries")
    op.drop_index("ix_summaries_position", table_name="summaries")
    op.drop_table("summaries")
