"""What a list of the log may be asked: filters, a text search, a sort, and the cursor that
pages it. Values only, and the SQL over `summaries s` they make (migration 0014's `search`
for the text) on SQLite or PostgreSQL.

A cursor is opaque to its reader: the sort key and position of the last row shown, so the
next page starts after it whatever was written since (keyset paging, never an offset).
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from omni.errors import InvalidRequest
from omni.inspect.records import Summary

# A sort's name → its key (None: the position alone) and direction.
SORTS: dict[str, tuple[str | None, str]] = {
    "newest": (None, "DESC"),
    "oldest": (None, "ASC"),
    # Longest first; one still running has no duration yet, and comes last.
    "duration": ("coalesce(s.finished_at - s.created_at, -1)", "DESC"),
    "tokens": ("coalesce(s.input_tokens, 0) + coalesce(s.output_tokens, 0)", "DESC"),
}
# Words as both indexes split them (letters and digits; `_` and punctuation separate).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Filters:
    """What a list keeps to (None: anything); `text`: words its input or output holds."""

    kind: str | None = None
    status: str | None = None
    model: str | None = None
    owner: str | None = None
    since_ms: int | None = None  # created at or after (unix ms)
    until_ms: int | None = None  # created before
    text: str | None = None
    sort: str = "newest"

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise InvalidRequest(f"'sort' must be one of {', '.join(SORTS)}.", param="sort")


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: its last row's sort key (0 for a sort by position) and position."""

    key: int
    position: int

    def encode(self) -> str:
        raw = f"{self.key}:{self.position}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
            key, position = raw.split(":")
            return cls(int(key), int(position))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            message = "'cursor' is not a cursor this list gave."
            raise InvalidRequest(message, param="cursor") from None


def words(text: str | None) -> list[str]:
    """The words of `text`, without their accents (as both indexes keep them)."""
    bare = "".join(
        c for c in unicodedata.normalize("NFKD", text or "") if not unicodedata.combining(c)
    )
    return _WORD.findall(bare)


def match(text: str, postgres: bool) -> str | None:
    """The index's query for `text`: every word, each as a prefix (None: no words)."""
    found = words(text)
    if not found:
        return None
    if postgres:
        return " & ".join(f"{w}:*" for w in found)
    return " ".join(f'"{w}"*' for w in found)


def where(
    filters: Filters, postgres: bool, scope: str | None = None, after: Cursor | None = None
) -> tuple[str, str, dict[str, Any]]:
    """The WHERE and ORDER BY over `summaries s` for `filters`, kept to `scope`'s objects
    (an API key's) and past `after`, and their arguments."""
    given = {
        "s.kind = :kind": filters.kind,
        "s.status = :status": filters.status,
        "s.model = :model": filters.model,
        "s.owner = :owner": filters.owner,
        "s.owner = :scope": scope,
        "s.created_at >= :since_ms": filters.since_ms,
        "s.created_at < :until_ms": filters.until_ms,
    }
    clauses = [clause for clause, value in given.items() if value is not None]
    args: dict[str, Any] = {
        "kind": filters.kind,
        "status": filters.status,
        "model": filters.model,
        "owner": filters.owner,
        "scope": scope,
        "since_ms": filters.since_ms,
        "until_ms": filters.until_ms,
    }
    query = match(filters.text or "", postgres)
    if query is not None:
        clauses.append(
            "s.position IN (SELECT position FROM search"
            " WHERE document @@ to_tsquery('simple', :match))"
            if postgres
            else "s.position IN (SELECT rowid FROM search WHERE search MATCH :match)"
        )
        args["match"] = query
    key, direction = SORTS[filters.sort]
    past = "<" if direction == "DESC" else ">"
    if after is not None and key is None:
        clauses.append(f"s.position {past} :after_position")
    elif after is not None:
        clauses.append(
            f"({key} {past} :after_key OR ({key} = :after_key AND s.position {past}"
            " :after_position))"
        )
    if after is not None:
        args.update(after_key=after.key, after_position=after.position)
    order = f"{key} {direction}, " if key is not None else ""
    return (
        f"WHERE {' AND '.join(clauses)}" if clauses else "",
        f"ORDER BY {order}s.position {direction}",
        {k: v for k, v in args.items() if v is not None},
    )


def sort_key(filters: Filters) -> str:
    """The column a page's rows carry their sort key in (for its cursor)."""
    key = SORTS[filters.sort][0]
    return f"{key or '0'} AS sort_key"


@dataclass(frozen=True)
class Page:
    """One page of a list, and where the next starts (None: this is the last)."""

    rows: list[Summary]
    next_cursor: Cursor | None

    def to_json(self) -> dict[str, Any]:
        cursor = None if self.next_cursor is None else self.next_cursor.encode()
        return {
            "object": "list",
            "data": [row.to_json() for row in self.rows],
            "has_more": cursor is not None,
            "next_cursor": cursor,
        }


def moment(value: str, name: str) -> int:
    """A time a list is asked from or until, as unix ms: ISO 8601 (a date, or a date and
    time; UTC unless it says otherwise) or unix ms."""
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise InvalidRequest(
            f"'{name}' must be an ISO 8601 time (2026-12-05T14:30:00Z) or unix ms.", param=name
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
