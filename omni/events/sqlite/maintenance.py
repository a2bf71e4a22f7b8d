"""Operating the log file: check its invariants, back it up online, purge finished objects.

Plain sqlite3 on the file, used by `omni db` and by the server's retention (which runs the
deletes through its own store, so its memory of recent rows forgets them too). What the
rows mean is omni/events/checks.py's and omni/events/maintenance.py's, as for PostgreSQL.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from omni.errors import DatabaseInUse, StoreError
from omni.events.checks import Problem, cache_problems, request_problems, stream_problems
from omni.events.maintenance import PER_TRANSACTION, Finished, Vocabulary, finished_of, streams_of
from omni.lock import DatabaseLock


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
    ends = sorted(vocabulary.ends)
    marks = ",".join("?" * len(ends))
    streams = conn.execute(
        f"""SELECT stream_id, min(seq), max(seq), count(*),
                   sum(type IN ({marks})), max(CASE WHEN type IN ({marks}) THEN seq END)
            FROM events GROUP BY stream_id
            HAVING min(seq) != 0 OR max(seq) != count(*) - 1
                OR (instr(stream_id, '/') = 0 AND (sum(type IN ({marks})) > 1
                    OR max(CASE WHEN type IN ({marks}) THEN seq END) != max(seq)))""",
        ends * 4,
    )
    found = stream_problems(streams)
    requests = conn.execute(
        """SELECT p.stream_id, r.type FROM events p
           LEFT JOIN events r ON r.stream_id = p.stream_id || '/request' AND r.seq = 0
           WHERE p.seq = 0 AND instr(p.stream_id, '/') = 0
             AND (r.type IS NULL OR r.type != ?)""",
        (vocabulary.accepted,),
    )
    found += request_problems(requests)
    cached = conn.execute(
        """SELECT key, completion_id FROM chat_cache c WHERE NOT EXISTS
           (SELECT 1 FROM events e WHERE e.stream_id = c.completion_id AND e.seq = 0)"""
    )
    return found + cache_problems(cached)


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
    closed = sorted(vocabulary.closed)
    closes = [*closed, before_ms] if closed else []
    closing = (  # objects a tombstone ends: deleted when it was written
        f"""
            UNION ALL
            SELECT substr(stream_id, 1, length(stream_id) - 8), NULL, NULL, 1, max(created_at)
            FROM events WHERE type IN ({",".join("?" * len(closed))})
              AND stream_id LIKE '%/request' GROUP BY stream_id HAVING max(created_at) < ?"""
        if closed
        else ""
    )
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
            SELECT e.id AS id, e.type, e.said, d.at IS NOT NULL, max(e.at, coalesce(d.at, 0))
              AS done
            FROM ended e LEFT JOIN deleted d ON d.id = e.id WHERE done < ?{closing}
            ORDER BY done, id""",
        [*(v for pair in paths for v in pair), *ends, before_ms, *dels, before_ms, *closes],
    ).fetchall()
    return finished_of(rows, vocabulary, statuses)


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
