"""What the migrations write for PostgreSQL where SQLite's SQL differs: JSON reads, times in
ISO form, triggers as plpgsql functions. Each migration branches on the dialect and keeps
SQLite's statements as they were; these build the PostgreSQL ones with the same meaning.

SQLite's json_extract gives SQL values (a JSON true is 1, a number an integer); here `text()`
reads a JSON value as text (`#>>`) and `num()` as an integer (omni_int: a number, or a
boolean as 1/0, else NULL), so a projection holds the same values on both. A row whose data
is not JSON reads as NULL (omni_json), as json_valid() makes it on SQLite: its append never
fails for it.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

# An integer column of unix ms or a log position: SQLite's INTEGER is 64-bit, PostgreSQL's
# is not (SQLite's DDL stays as it was).
BIG = sa.Integer().with_variant(sa.BigInteger(), "postgresql")

# Made by 0001 on PostgreSQL, for every later migration and for the store's own queries.
FUNCTIONS = [
    """CREATE FUNCTION omni_json(t text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN t::jsonb;
EXCEPTION WHEN others THEN
  RETURN NULL;
END $$""",
    # Bounded: a number past bigint reads as NULL rather than failing the append.
    """CREATE FUNCTION omni_int(j jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
SELECT CASE jsonb_typeof(j)
  WHEN 'boolean' THEN CASE WHEN j = 'true'::jsonb THEN 1 ELSE 0 END
  WHEN 'number' THEN CASE WHEN abs((j #>> '{}')::numeric) < 9e18
    THEN round((j #>> '{}')::numeric)::bigint END
END $$""",
    # json_each over what is not an array walks nothing here (the log holds arrays there).
    """CREATE FUNCTION omni_array(j jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
SELECT CASE jsonb_typeof(j) WHEN 'array' THEN j ELSE '[]'::jsonb END $$""",
]
FUNCTION_NAMES = ["omni_array(jsonb)", "omni_int(jsonb)", "omni_json(text)"]


def is_postgres() -> bool:
    return bool(op.get_context().dialect.name == "postgresql")


def path(json_path: str) -> str:
    """'$.choices[0].delta.content' → '{choices,0,delta,content}' (a literal)."""
    if not json_path.startswith("$"):
        raise ValueError(f"not a JSON path: {json_path}")
    parts = re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", json_path[1:])
    return "'{" + ",".join(name or index for name, index in parts) + "}'"


def text(doc: str, json_path: str) -> str:
    return f"({doc} #>> {path(json_path)})"


def num(doc: str, json_path: str) -> str:
    return f"omni_int({doc} #> {path(json_path)})"


def iso(ms: str) -> str:
    """Unix ms → '2026-12-02T07:51:35.815Z', as 0005's iso() makes it on SQLite."""
    return (
        f"(to_char(to_timestamp(({ms}) / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')"
        f" || '.' || lpad((({ms}) % 1000)::text, 3, '0') || 'Z')"
    )


def new_row(columns: str) -> str:
    """In a trigger function: the new row as a one-row source, with its data as `doc`."""
    cols = ", ".join(f"NEW.{c} AS {c}" for c in columns.split(", "))
    return f"(SELECT {cols}, omni_json(NEW.data) AS doc)"


def all_rows(columns: str) -> str:
    """Every event as a source, with its data as `doc` (a rebuild)."""
    return f"(SELECT {columns}, omni_json(data) AS doc FROM events)"


def trigger(name: str, on: str, when: str, body: str) -> list[str]:
    """A row trigger on `events` (AFTER `on`, firing WHEN `when`) running `body`."""
    return [
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{body};\nRETURN NULL;\nEND $$",
        f"CREATE TRIGGER {name} AFTER {on} ON events FOR EACH ROW WHEN ({when})"
        f" EXECUTE FUNCTION {name}()",
    ]


def drop_trigger(name: str) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {name} ON events", f"DROP FUNCTION IF EXISTS {name}()"]
