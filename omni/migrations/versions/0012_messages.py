"""Messages (Anthropic's Messages API) in the `summaries` projection, a view `messages` over
them, their text in `timeline`, and the replay-cache index for them.

0005's triggers give a message its row when it is accepted (kind `message`, from its
request); these fold its stream of Anthropic's events: the first content block is its first
token, `message_delta` carries the usage and the stop reason, and an ending its status
(`message_stop` completed, Anthropic's `error` failed, `omni.message.cancelled` cancelled).
In `summaries` a message's input_tokens are every prompt token (Anthropic's input_tokens plus
those read from or written to the prompt cache), as a chat completion's prompt_tokens are;
the view gives Anthropic's own figures. `timeline` shows a block delta's text (0005's view
again, with one more case). A stored, deterministic message that ends with `message_stop`
gets its `chat_cache` row as 0004 gives a chat completion's (its tombstone and purge
triggers already remove any stream's row). On PostgreSQL the same (omni/migrations/pgsql.py).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from alembic import op

from omni.migrations import pgsql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_0004 = importlib.import_module("omni.migrations.versions.0004_chat_cache_projection")
_0005 = importlib.import_module("omni.migrations.versions.0005_views")

_COLUMNS = "position, stream_id, seq, type, created_at"
NEW_ROW, EVENTS = _0005.NEW_ROW, _0005.EVENTS
ENDS = ("message_stop", "error", "omni.message.cancelled")
_ENDS = "(" + ", ".join(f"'{t}'" for t in ENDS) + ")"
# The first block opens with the first token a client saw (seq 0 is message_start).
_FIRST_WHEN = "NEW.type = 'content_block_start' AND NEW.seq = 1"


def _j(path: str) -> str:
    return f"json_extract(e.doc, '{path}')"


def _statements(j: Callable[[str, bool], str]) -> dict[str, tuple[str, str]]:
    """Trigger name → (its WHEN, its statement over `{src}`), with `j` reading a JSON path of
    the event's data (SQLite's or PostgreSQL's; as an integer where it says so)."""
    first = """
UPDATE summaries SET first_token_at = coalesce(first_token_at, e.created_at)
FROM {src} AS e
WHERE e.type = 'content_block_start' AND e.seq = 1 AND summaries.id = e.stream_id
    AND summaries.kind = 'message'
"""
    usage = f"""
UPDATE summaries SET input_tokens = {j("$.usage.input_tokens", True)}
        + coalesce({j("$.usage.cache_read_input_tokens", True)}, 0)
        + coalesce({j("$.usage.cache_creation_input_tokens", True)}, 0),
    output_tokens = {j("$.usage.output_tokens", True)},
    cached_tokens = {j("$.usage.cache_read_input_tokens", True)},
    finish_reason = {j("$.delta.stop_reason", False)}
FROM {{src}} AS e
WHERE e.type = 'message_delta' AND summaries.id = e.stream_id AND summaries.kind = 'message'
"""
    end = f"""
UPDATE summaries SET end_position = e.position, finished_at = e.created_at,
    status = CASE e.type WHEN 'message_stop' THEN 'completed' WHEN 'error' THEN 'failed'
        ELSE 'cancelled' END,
    error_code = {j("$.error.type", False)},
    error_message = {j("$.error.message", False)}
FROM {{src}} AS e
WHERE e.type IN {_ENDS} AND summaries.id = e.stream_id AND summaries.kind = 'message'
"""
    return {
        "summaries_on_message_first": (_FIRST_WHEN, first),
        "summaries_on_message_usage": ("NEW.type = 'message_delta'", usage),
        "summaries_on_message_end": (f"NEW.type IN {_ENDS}", end),
    }


STATEMENTS = _statements(lambda path, number: _j(path))
TRIGGERS = [
    f"CREATE TRIGGER {name} AFTER INSERT ON events WHEN {when} BEGIN {sql.format(src=NEW_ROW)}; END"
    for name, (when, sql) in STATEMENTS.items()
]
REBUILD = [sql.format(src=EVENTS) for _, sql in STATEMENTS.values()]  # after 0005's

# The replay-cache index: 0004's trigger and rebuild, on a message's last event.
CACHE = "chat_cache_on_message_end"
_USAGE = "'chat.completion.usage'"
CACHE_TRIGGER = (
    _0004.TRIGGERS[0].replace("chat_cache_on_end", CACHE).replace(_USAGE, "'message_stop'")
)
CACHE_REBUILD = _0004.REBUILD.replace(_USAGE, "'message_stop'")
CACHE_FORGET = "DELETE FROM chat_cache WHERE completion_id LIKE 'msg\\_%' ESCAPE '\\'"
assert CACHE_TRIGGER.count("'message_stop'") == 1 and CACHE_REBUILD.count("'message_stop'") == 1

# A block delta's text (a text, a thinking, a tool call's arguments), before 0005's cases.
_TIMELINE_OLD = "CASE WHEN NOT json_valid(e.data) THEN NULL"
_DELTA = "coalesce(json_extract(e.data, '$.delta.text'), json_extract(e.data, '$.delta.thinking'),"
_DELTA += " json_extract(e.data, '$.delta.partial_json'))"
TIMELINE = _0005.VIEWS[2].replace(
    _TIMELINE_OLD, f"{_TIMELINE_OLD}\n         WHEN e.type = 'content_block_delta' THEN {_DELTA}"
)
assert TIMELINE != _0005.VIEWS[2]

_ISO = _0005.iso
# A message's `message_delta` is the event before its `message_stop`.
_DELTA_JOIN = """LEFT JOIN events t ON t.position = s.end_position AND t.type = 'message_stop'
LEFT JOIN events u ON u.stream_id = s.id AND u.seq = t.seq - 1 AND u.type = 'message_delta'"""
_TEXT = """(SELECT group_concat(json_extract(c.data, '$.delta.text'), '') FROM events c
     WHERE c.stream_id = s.id AND +c.type = 'content_block_delta' AND json_valid(c.data))"""


def _u(path: str) -> str:
    return f"CASE WHEN json_valid(u.data) THEN json_extract(u.data, '{path}') END"


VIEW = f"""CREATE VIEW messages AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {_ISO("s.finished_at")} END AS finished,
    s.finish_reason AS stop_reason, {_u("$.delta.stop_sequence")} AS stop_sequence,
    {_u("$.usage.input_tokens")} AS input_tokens,
    {_u("$.usage.cache_read_input_tokens")} AS cache_read_input_tokens,
    {_u("$.usage.cache_creation_input_tokens")} AS cache_creation_input_tokens,
    s.output_tokens, s.store AS stored,
    CASE WHEN s.mirror_of IS NULL THEN 'generated' ELSE 'cache' END AS source,
    s.mirror_of AS replay_of, s.error_code AS error_type, s.error_message,
    s.started_at - s.created_at AS queued_ms,
    s.first_token_at - s.created_at AS ttft_ms,
    CASE WHEN s.output_tokens > 1 AND s.finished_at > s.first_token_at
         THEN round((s.output_tokens - 1) * 1000.0 / (s.finished_at - s.first_token_at), 1)
    END AS tokens_per_s,
    s.finished_at - s.created_at AS total_ms,
    {_TEXT} AS text, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s {_DELTA_JOIN}
WHERE s.kind = 'message'"""


# --- PostgreSQL -------------------------------------------------------------------------


def _pj(path: str, number: bool) -> str:
    return pgsql.num("e.doc", path) if number else pgsql.text("e.doc", path)


PG_STATEMENTS = _statements(_pj)
PG_TRIGGERS = [
    statement
    for name, (when, sql) in PG_STATEMENTS.items()
    for statement in pgsql.trigger(
        name, "INSERT", when, sql.replace("{src}", pgsql.new_row(_COLUMNS))
    )
]
PG_REBUILD = [sql.replace("{src}", pgsql.all_rows(_COLUMNS)) for _, sql in PG_STATEMENTS.values()]
_PG_CACHE = _0004.PG_TRIGGERS[0]
PG_CACHE_TRIGGER = pgsql.trigger(
    CACHE, "INSERT", "NEW.type = 'message_stop'", _PG_CACHE[3]
)  # 0004's body names the new row only: the type is in the WHEN
assert _PG_CACHE[2] == f"NEW.type = {_USAGE}" and _USAGE not in _PG_CACHE[3]
PG_CACHE_REBUILD = _0004.PG_REBUILD.replace(_USAGE, "'message_stop'")
PG_CACHE_FORGET = "DELETE FROM chat_cache WHERE completion_id LIKE 'msg\\_%'"
assert PG_CACHE_REBUILD.count("'message_stop'") == 1

_PG_TIMELINE_OLD = "CASE WHEN e.type LIKE '%.delta'"
_PG_DELTA = ", ".join(
    pgsql.text("omni_json(e.data)", p)
    for p in ("$.delta.text", "$.delta.thinking", "$.delta.partial_json")
)
PG_TIMELINE = _0005.PG_VIEWS[2].replace(
    _PG_TIMELINE_OLD,
    f"CASE WHEN e.type = 'content_block_delta' THEN coalesce({_PG_DELTA})\n"
    f"         WHEN e.type LIKE '%.delta'",
)
assert PG_TIMELINE != _0005.PG_VIEWS[2]


def _pu(path: str, number: bool = True) -> str:
    return pgsql.num("omni_json(u.data)", path) if number else pgsql.text("omni_json(u.data)", path)


_PG_TEXT = f"""(SELECT string_agg({pgsql.text("c.doc", "$.delta.text")}, '' ORDER BY c.seq)
     FROM (SELECT c.seq, omni_json(c.data) AS doc FROM events c
           WHERE c.stream_id = s.id AND c.type = 'content_block_delta') AS c)"""
PG_VIEW = f"""CREATE VIEW messages AS SELECT
    s.id, s.status, s.model, s.created,
    CASE WHEN s.finished_at IS NOT NULL THEN {pgsql.iso("s.finished_at")} END AS finished,
    s.finish_reason AS stop_reason, {_pu("$.delta.stop_sequence", False)} AS stop_sequence,
    {_pu("$.usage.input_tokens")} AS input_tokens,
    {_pu("$.usage.cache_read_input_tokens")} AS cache_read_input_tokens,
    {_pu("$.usage.cache_creation_input_tokens")} AS cache_creation_input_tokens,
    s.output_tokens, s.store AS stored,
    CASE WHEN s.mirror_of IS NULL THEN 'generated' ELSE 'cache' END AS source,
    s.mirror_of AS replay_of, s.error_code AS error_type, s.error_message,
    s.started_at - s.created_at AS queued_ms,
    s.first_token_at - s.created_at AS ttft_ms,
    CASE WHEN s.output_tokens > 1 AND s.finished_at > s.first_token_at
         THEN round((s.output_tokens - 1) * 1000.0 / (s.finished_at - s.first_token_at), 1)
              ::double precision
    END AS tokens_per_s,
    s.finished_at - s.created_at AS total_ms,
    {_PG_TEXT} AS text, s.deleted, s.owner, s.created_at AS created_ms
FROM summaries s {_DELTA_JOIN}
WHERE s.kind = 'message'"""


def upgrade() -> None:
    if pgsql.is_postgres():
        statements = [*PG_TRIGGERS, *PG_REBUILD, *PG_CACHE_TRIGGER, PG_CACHE_REBUILD]
        statements += ["DROP VIEW timeline", PG_TIMELINE, PG_VIEW]
    else:
        statements = [*TRIGGERS, *REBUILD, CACHE_TRIGGER, CACHE_REBUILD]
        statements += ["DROP VIEW timeline", TIMELINE, VIEW]
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    """As 0011 left it: no view, no triggers of messages, 0005's timeline, and no index rows
    of messages (which an older server would never look up, nor rebuild)."""
    postgres = pgsql.is_postgres()
    op.execute("DROP VIEW IF EXISTS messages")
    op.execute("DROP VIEW IF EXISTS timeline")
    op.execute(_0005.PG_VIEWS[2] if postgres else _0005.VIEWS[2])
    for name in [*STATEMENTS, CACHE]:
        if postgres:
            for statement in pgsql.drop_trigger(name):
                op.execute(statement)
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(PG_CACHE_FORGET if postgres else CACHE_FORGET)
