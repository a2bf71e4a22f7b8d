"""Operating the log file: check its invariants, back it up online, purge finished objects.

Plain sqlite3 on the file, used by `omni db` and by the server's retention (which runs the
deletes through its own store, so its memory of recent rows forgets them too). The events
layer names no event types: what ends a stream and what deletes an object come in a
`Vocabulary` from the caller.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from omni.errors import DatabaseInUse, StoreError
from omni.lock import DatabaseLock

SUFFIXES = ("/request", "/tokens")  # the internal streams an object owns besides its own
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """`ends`: each terminal event type and the status it means (a value starting with "$."
    is a JSON path to the status in the event's data); `deleted`: tombstone types;
    `accepted`: the type that opens every /request stream."""

    ends: Mapping[str, str]
    deleted: frozenset[str]
    accepted: str


@dataclass(frozen=True, slots=True)
class Problem:
    stream_id: str  # "" for the file as a whole
    what: str


@dataclass(frozen=True, slots=True)
class Finished:
    """An object a purge may remove: its public id, final status and when it ended (ms)."""

    id: str
    status: str
    ended_at: int


def parse_duration(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w' (or '1d12h') as seconds, else ValueError."""
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"{text!r}: expected a duration such as 30d, 12h, 90m or 45s")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_moment(text: str) -> int:
    """An ISO 8601 date or date-time (local time unless it names a zone) as unix ms."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r}: expected an ISO date such as 2025-01-31") from None
    return int(moment.timestamp() * 1000)  # a naive value is read as local time


def connect(path: str) -> sqlite3.Connection:
    """A connection to an existing log (never creates one); transactions are ours."""
    if not Path(path).is_file():
        raise StoreError(f"no database at {path}")
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA secure_delete=ON")  # what a purge deletes is zeroed, not left
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    return conn


@contextmanager
def no_live_server(db_path: str) -> Iterator[None]:
    """Hold the lock a live `omni serve` holds (omni/lock.py) for the block, else StoreError:
    a server keeps recent rows in memory and would go on answering what was removed."""
    try:
        lock = DatabaseLock.acquire(db_path)
    except DatabaseInUse as exc:
        raise StoreError(f"{exc.message}; or let it purge with `omni serve --retention`") from None
    try:
        yield
    finally:
        lock.release()


def check(conn: sqlite3.Connection, vocabulary: Vocabulary) -> list[Problem]:
    """Every broken invariant: SQLite's integrity, contiguous seq from 0 in each stream, at
    most one terminal event per public stream and nothing after it, a /request stream
    opening with a request for each public stream, cache rows pointing at completions.
    One read transaction: a server may write meanwhile."""
    found: list[Problem] = []
    conn.execute("BEGIN")
    try:
        sqlite = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        found += [Problem("", what) for what in sqlite if sqlite != ["ok"]]
        if sqlite == ["ok"] and (unused := _unused_pages(conn)):
            found.append(Problem("", f"{unused} pages of the file are never used"))
        found += _invariants(conn, vocabulary)
    except sqlite3.DatabaseError as exc:  # a page too damaged to read at all
        found.append(Problem("", f"unreadable: {exc}"))
    finally:
        conn.execute("ROLLBACK")
    return found


def _unused_pages(conn: sqlite3.Connection) -> int:
    """Pages no table, index or the free list holds. SQLite 3.40's integrity_check leaves this
    out once the schema has a view (its list of roots then starts with a view's 0, which it
    reads as "a partial check"), so it is counted here from dbstat; 0 without dbstat."""
    try:
        row = conn.execute(
            "SELECT (SELECT page_count FROM pragma_page_count)"
            " - (SELECT freelist_count FROM pragma_freelist_count)"
            " - (SELECT count(DISTINCT pageno) FROM dbstat)"
        ).fetchone()
    except sqlite3.OperationalError:  # built without SQLITE_ENABLE_DBSTAT_VTAB
        return 0
    return int(row[0])


def _invariants(conn: sqlite3.Connection, vocabulary: Vocabulary) -> list[Problem]:
    found: list[Problem] = []
    ends = sorted(vocabulary.ends)
    marks = ",".join("?" * len(ends))
    for sid, low, high, count, terminals, last_end in conn.execute(
        f"""SELECT stream_id, min(seq), max(seq), count(*),
                   sum(type IN ({marks})), max(CASE WHEN type IN ({marks}) THEN seq END)
            FROM events GROUP BY stream_id
            HAVING min(seq) != 0 OR max(seq) != count(*) - 1
                OR (instr(stream_id, '/') = 0 AND (sum(type IN ({marks})) > 1
                    OR max(CASE WHEN type IN ({marks}) THEN seq END) != max(seq)))""",
        ends * 4,
    ):
        if low != 0 or high != count - 1:
            found.append(Problem(sid, f"seq not contiguous from 0: {count} rows, {low}..{high}"))
        if "/" in sid:
            continue  # terminal events end public streams only
        if terminals > 1:
            found.append(Problem(sid, f"{terminals} terminal events"))
        if last_end is not None and last_end != high:
            found.append(Problem(sid, f"events after the terminal event at seq {last_end}"))
    for sid, first in conn.execute(
        """SELECT p.stream_id, r.type FROM events p
           LEFT JOIN events r ON r.stream_id = p.stream_id || '/request' AND r.seq = 0
           WHERE p.seq = 0 AND instr(p.stream_id, '/') = 0
             AND (r.type IS NULL OR r.type != ?)""",
        (vocabulary.accepted,),
    ):
        what = "no /request stream" if first is None else f"/request opens with {first}"
        found.append(Problem(sid, what))
    for key, cid in conn.execute(
        """SELECT key, completion_id FROM chat_cache c WHERE NOT EXISTS
           (SELECT 1 FROM events e WHERE e.stream_id = c.completion_id AND e.seq = 0)"""
    ):
        found.append(Problem(cid, f"replay-cache entry {key[:16]} points at no stream"))
    return found


def finished(
    conn: sqlite3.Connection,
    vocabulary: Vocabulary,
    before_ms: int,
    statuses: Iterable[str] | None = None,
) -> list[Finished]:
    """Objects that ended (a terminal event; and for a deleted one, its tombstone) before
    `before_ms`, oldest first, with the given statuses ("deleted" wins over the final one).
    One still running is never among them, deleted or not: its recorder still appends."""
    ends = sorted(vocabulary.ends)
    dels = sorted(vocabulary.deleted)
    paths = [(t, p) for t, p in sorted(vocabulary.ends.items()) if p.startswith("$.")]
    # The status out of the data only where it lives there (a completed response's data
    # holds the whole response: not parsed for nothing).
    said = "".join(" WHEN ? THEN json_extract(data, ?)" for _ in paths)
    said = f"max(CASE type{said} END)" if paths else "NULL"
    rows = conn.execute(
        f"""WITH ended AS (
                SELECT stream_id AS id, max(created_at) AS at, max(type) AS type, {said} AS said
                FROM events WHERE type IN ({",".join("?" * len(ends))})
                  AND instr(stream_id, '/') = 0 AND created_at < ? GROUP BY stream_id),
            deleted AS (
                SELECT substr(stream_id, 1, length(stream_id) - 8) AS id, max(created_at) AS at
                FROM events WHERE type IN ({",".join("?" * len(dels))})
                  AND stream_id LIKE '%/request' GROUP BY stream_id)
            SELECT e.id, e.type, e.said, d.at IS NOT NULL, max(e.at, coalesce(d.at, 0)) AS done
            FROM ended e LEFT JOIN deleted d ON d.id = e.id
            WHERE done < ? ORDER BY done, e.id""",
        [*(v for pair in paths for v in pair), *ends, before_ms, *dels, before_ms],
    ).fetchall()
    wanted = None if statuses is None else set(statuses)
    found = []
    for oid, type_, said, deleted, done in rows:
        status = vocabulary.ends[type_]
        status = "deleted" if deleted else (str(said) if status.startswith("$.") else status)
        if wanted is None or status in wanted:
            found.append(Finished(oid, status, int(done)))
    return found


def streams_of(ids: Iterable[str]) -> list[str]:
    """Every stream the objects `ids` own."""
    return [s for oid in ids for s in (oid, *(oid + suffix for suffix in SUFFIXES))]


def count_events(conn: sqlite3.Connection, ids: Sequence[str]) -> int:
    total = 0
    for batch in _batches(streams_of(ids)):
        marks = ",".join("?" * len(batch))
        sql = f"SELECT count(*) FROM events WHERE stream_id IN ({marks})"
        total += conn.execute(sql, batch).fetchone()[0]
    return int(total)


def delete(conn: sqlite3.Connection, ids: Sequence[str]) -> int:
    """Remove the objects `ids` whole in the caller's transaction (their replay-cache rows go
    with their events: the database's triggers); returns the events removed."""
    removed = 0
    for batch in _batches(streams_of(ids)):
        sql = f"DELETE FROM events WHERE stream_id IN ({','.join('?' * len(batch))})"
        removed += conn.execute(sql, batch).rowcount
    return removed


# Objects one purge transaction removes (the CLI's and retention's): appends wait for one at most.
PER_TRANSACTION = 256


def purge(
    conn: sqlite3.Connection, ids: Sequence[str], per_transaction: int = PER_TRANSACTION
) -> int:
    """delete() in transactions of `per_transaction` objects: a writer waits for one at most."""
    removed = 0
    for start in range(0, len(ids), per_transaction):
        conn.execute("BEGIN IMMEDIATE")
        try:
            removed += delete(conn, ids[start : start + per_transaction])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return removed


def file_bytes(db_path: str) -> int:
    """The log's size on disk, its WAL included."""
    return sum(os.path.getsize(p) for p in (db_path, f"{db_path}-wal") if os.path.exists(p))


def vacuum(conn: sqlite3.Connection) -> None:
    """Give freed pages back to the file system (no server may hold the log: VACUUM
    rewrites the whole file and holds the write lock meanwhile)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def backup(db_path: str, target: str) -> None:
    """An online copy of the log at `target` (which must not exist): one backup step, so
    one read snapshot, which in WAL mode never blocks the writer. Written beside the
    target first, so a failed copy leaves nothing under its name."""
    if os.path.lexists(target):
        raise StoreError(f"{target} exists: give a new path (a backup never overwrites)")
    partial = f"{target}.partial"
    with closing(connect(db_path)) as source:
        try:
            with closing(sqlite3.connect(partial)) as copy:
                source.backup(copy)  # pages=-1: the whole file in one step
                copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        except (sqlite3.Error, OSError) as exc:
            _remove(partial)
            raise StoreError(f"backup to {target} failed: {exc}") from exc
    with open(partial, "rb+") as written:
        os.fsync(written.fileno())
    os.replace(partial, target)


def _remove(path: str) -> None:
    for p in (path, f"{path}-journal", f"{path}-wal", f"{path}-shm"):
        if os.path.exists(p):
            os.remove(p)


def _batches(values: list[str], size: int = 900) -> Iterator[list[str]]:
    """Within SQLite's bound on parameters of a statement."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
