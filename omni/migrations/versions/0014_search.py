"""Full-text search over what each object was asked and what it answered: table `search`,
one row per `summaries` row (keyed by its position), its input text and its output text.

Kept by the database itself, by triggers on `summaries` (so it follows that projection
whoever writes the log, through its rebuilds and purges): a row gets its input when its
object is accepted (the request's text: messages, instructions, prompt, system; not images,
audio or tool calls) and its output when it ends (a response's output text, a completion's
or a message's deltas, a transcript). Speech, images, embeddings and conversations are found
by what was asked. The objects already in the log are indexed here by the same expressions.
SQLite: an FTS5 table (unicode61, case and accents folded). PostgreSQL: a tsvector column
('simple': no stemming, as on SQLite) under a GIN index, and a function that walks a
request's JSON as SQLite's json_tree does.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import unicodedata

from alembic import op

from omni.migrations import pgsql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# The keys of a request's body whose strings are its text (array elements under them too:
# a list of prompts or inputs).
TEXT_KEYS = ("content", "text", "input", "instructions", "prompt", "system", "thinking")
_KEYS = "(" + ", ".join(f"'{k}'" for k in TEXT_KEYS) + ")"
_UNDER = " OR ".join(f"t.path LIKE '%.{k}'" for k in TEXT_KEYS)

# `{s}`: the summaries row (NEW in a trigger, `s` in the backfill).
# A request's text is in its body, and a response's in its input items (kept beside it).
_INPUT = f"""(SELECT group_concat(t.value, ' ') FROM events r, json_tree(r.data) t
    WHERE r.position = {{s}}.position AND json_valid(r.data) AND t.type = 'text'
      AND (t.fullkey LIKE '$.body.%' OR t.fullkey LIKE '$.input[%')
      AND (t.key IN {_KEYS} OR (typeof(t.key) = 'integer' AND ({_UNDER})))
      AND t.value NOT LIKE 'data:%')"""
_DELTAS = """(SELECT group_concat({text}, '') FROM events d
    WHERE d.stream_id = {{s}}.id AND +d.type IN {types} AND json_valid(d.data))"""
_OUTPUT = f"""CASE {{s}}.kind
  WHEN 'response' THEN (SELECT group_concat(o.value, ' ')
    FROM events t, json_tree(t.data, '$.response.output') o
    WHERE t.position = {{s}}.end_position AND json_valid(t.data)
      AND o.key = 'text' AND o.type = 'text')
  WHEN 'transcription' THEN (SELECT json_extract(t.data, '$.text') FROM events t
    WHERE t.position = {{s}}.end_position AND json_valid(t.data))
  WHEN 'message' THEN {
    _DELTAS.format(text="json_extract(d.data, '$.delta.text')", types="('content_block_delta')")
}
  WHEN 'chat.completion' THEN {
    _DELTAS.format(
        text="json_extract(d.data, '$.choices[0].delta.content')",
        types="('chat.completion.chunk')",
    )
}
  WHEN 'text_completion' THEN {
    _DELTAS.format(
        text="json_extract(d.data, '$.choices[0].text')", types="('text_completion.chunk')"
    )
}
END"""
TRIGGERS = [
    "CREATE TRIGGER search_on_accept AFTER INSERT ON summaries BEGIN INSERT OR REPLACE"
    f" INTO search (rowid, input) VALUES (NEW.position, {_INPUT.format(s='NEW')}); END",
    "CREATE TRIGGER search_on_end AFTER UPDATE OF end_position ON summaries"
    " WHEN NEW.end_position IS NOT NULL BEGIN"
    f" UPDATE search SET output = {_OUTPUT.format(s='NEW')} WHERE rowid = NEW.position; END",
    "CREATE TRIGGER search_on_purge AFTER DELETE ON summaries BEGIN"
    " DELETE FROM search WHERE rowid = OLD.position; END",
]
TRIGGER_NAMES = ["search_on_accept", "search_on_end", "search_on_purge"]
BACKFILL = (
    f"INSERT INTO search (rowid, input, output) SELECT s.position, {_INPUT.format(s='s')},"
    f" {_OUTPUT.format(s='s')} FROM summaries s"
)

# PostgreSQL: a request's text, its JSON walked as json_tree walks it (an array's elements
# under their array's key).
PG_FUNCTION = f"""CREATE FUNCTION omni_search_input(body jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
WITH RECURSIVE node(key, value) AS (
  SELECT NULL::text, body
  UNION ALL
  SELECT coalesce(e.key, n.key), e.value FROM node n CROSS JOIN LATERAL (
    SELECT o.key, o.value FROM jsonb_each(
      CASE jsonb_typeof(n.value) WHEN 'object' THEN n.value END) AS o
    UNION ALL
    SELECT NULL, a.value FROM jsonb_array_elements(
      CASE jsonb_typeof(n.value) WHEN 'array' THEN n.value END) AS a) AS e
)
SELECT string_agg(value #>> '{{}}', ' ') FROM node
WHERE jsonb_typeof(value) = 'string' AND key IN {_KEYS} AND left(value #>> '{{}}', 5) <> 'data:'
$$"""
_PG_INPUT = """(SELECT concat_ws(' ', omni_search_input(r.doc -> 'body'),
        omni_search_input(r.doc -> 'input'))
    FROM (SELECT omni_json(data) AS doc FROM events WHERE position = {s}.position) AS r)"""
_PG_DELTAS = """(SELECT string_agg({text}, '' ORDER BY d.seq) FROM
    (SELECT seq, omni_json(data) AS doc FROM events WHERE stream_id = {{s}}.id
     AND type = '{type_}') AS d)"""
_PG_OUTPUT = f"""CASE {{s}}.kind
  WHEN 'response' THEN (SELECT string_agg(p.value ->> 'text', ' ')
    FROM events t,
      jsonb_array_elements(omni_array(omni_json(t.data) #> '{{{{response,output}}}}')) AS o,
      jsonb_array_elements(omni_array(o.value -> 'content')) AS p
    WHERE t.position = {{s}}.end_position)
  WHEN 'transcription' THEN (SELECT omni_json(t.data) ->> 'text' FROM events t
    WHERE t.position = {{s}}.end_position)
  WHEN 'message' THEN {
    _PG_DELTAS.format(text="d.doc #>> '{{delta,text}}'", type_="content_block_delta")
}
  WHEN 'chat.completion' THEN {
    _PG_DELTAS.format(text="d.doc #>> '{{choices,0,delta,content}}'", type_="chat.completion.chunk")
}
  WHEN 'text_completion' THEN {
    _PG_DELTAS.format(text="d.doc #>> '{{choices,0,text}}'", type_="text_completion.chunk")
}
END"""


def _accents() -> tuple[str, str]:
    """Latin letters with accents, and each one's letter without (as unicode61 folds them;
    PostgreSQL's `unaccent` is an extension a log's database may not have)."""
    pairs = [
        (c, base[0])
        for c in map(chr, range(0xC0, 0x180))
        if (base := unicodedata.normalize("NFKD", c))[0].isascii() and len(base) > 1
    ]
    return "".join(c for c, _ in pairs), "".join(b for _, b in pairs)


_FROM, _TO = _accents()
PG_TABLE = f"""CREATE TABLE search (
    position bigint PRIMARY KEY, input text, output text,
    document tsvector GENERATED ALWAYS AS (to_tsvector('simple', translate(
        coalesce(input, '') || ' ' || coalesce(output, ''), '{_FROM}', '{_TO}'))) STORED)"""
PG_INDEX = "CREATE INDEX ix_search_document ON search USING gin (document)"
_PG_BODIES = {  # trigger → (when it fires, its statement)
    "search_on_accept": (
        "INSERT",
        "INSERT INTO search (position, input) VALUES (NEW.position, "
        f"{_PG_INPUT.format(s='NEW')}) ON CONFLICT (position) DO UPDATE SET"
        " input = EXCLUDED.input",
    ),
    "search_on_end": (
        "UPDATE OF end_position",
        f"UPDATE search SET output = {_PG_OUTPUT.format(s='NEW')} WHERE position = NEW.position",
    ),
    "search_on_purge": ("DELETE", "DELETE FROM search WHERE position = OLD.position"),
}
_PG_WHEN = {"search_on_end": "WHEN (NEW.end_position IS NOT NULL)"}
PG_TRIGGERS = [
    statement
    for name, (on, body) in _PG_BODIES.items()
    for statement in (
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{body};\nRETURN NULL;\nEND $$",
        f"CREATE TRIGGER {name} AFTER {on} ON summaries FOR EACH ROW {_PG_WHEN.get(name, '')}"
        f" EXECUTE FUNCTION {name}()",
    )
]
PG_BACKFILL = (
    f"INSERT INTO search (position, input, output) SELECT s.position, {_PG_INPUT.format(s='s')},"
    f" {_PG_OUTPUT.format(s='s')} FROM summaries s"
)


def upgrade() -> None:
    if pgsql.is_postgres():
        for statement in [PG_FUNCTION, PG_TABLE, PG_INDEX, *PG_TRIGGERS, PG_BACKFILL]:
            op.execute(statement)
        return
    op.execute(
        "CREATE VIRTUAL TABLE search USING fts5(input, output,"
        " tokenize = 'unicode61 remove_diacritics 2')"
    )
    for statement in [*TRIGGERS, BACKFILL]:
        op.execute(statement)


def downgrade() -> None:
    postgres = pgsql.is_postgres()
    for name in TRIGGER_NAMES:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON summaries" if postgres else ""))
        if postgres:
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.execute("DROP TABLE IF EXISTS search")
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS omni_search_input(jsonb)")
