"""Operating a PostgreSQL log: SQLite's checks, listings and purges in PostgreSQL's SQL,
over a sync SQLAlchemy connection (the CLI's engine, or the server's through `run_sync`).

What is SQLite's alone has no counterpart here: the file's integrity and unused pages (the
server keeps its own pages sound), the lock against a live server (a PostgreSQL store keeps no
rows in memory, so a purge under a running server is safe), an online copy (pg_dump makes it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from omni.errors import StoreError
from omni.events.checks import Problem, cache_problems, request_problems, stream_problems
from omni.events.maintenance import PER_TRANSACTION, Finished, Vocabulary, finished_of, streams_of
from omni.events.postgres.connections import LOG_LOCK
from omni.events.postgres.store import json_path
from omni.location import postgres_url, require_driver, shown

BACKUP = (
    "omni db backup copies an SQLite file; back a PostgreSQL log up with PostgreSQL's own"
    " tools: pg_dump --format=custom --file=omni.dump DATABASE_URL (pg_restore restores it)"
)
_DELETE = text("DELETE FROM events WHERE stream_id = ANY(:s)")
_TERMINALS = "count(*) FILTER (WHERE type = ANY(:ends))"
_LAST_END = "max(seq) FILTER (WHERE type = ANY(:ends))"


@contextmanager
def opened(url: str) -> Iterator[Engine]:
    """A sync engine on the log for one command (no pool: it holds a connection or two), its
    driver's errors as one StoreError line."""
    require_driver()
    engine = create_engine(postgres_url(url), poolclass=NullPool)
    try:
        yield engine
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise StoreError(f"{shown(url)}: {cause}") from None
    finally:
        engine.dispose()


def check(conn: Connection, vocabulary: Vocabulary) -> list[Problem]:
    """Every broken invariant of the log (as SQLite's check, less its file checks), read in
    one snapshot: a server may write meanwhile."""
    with conn.begin():
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        streams = conn.execute(
            text(
                f"""SELECT stream_id, min(seq), max(seq), count(*), {_TERMINALS}, {_LAST_END}
                FROM events GROUP BY stream_id
                HAVING min(seq) != 0 OR max(seq) != count(*) - 1
                    OR (strpos(stream_id, '/') = 0 AND ({_TERMINALS} > 1
                        OR {_LAST_END} != max(seq)))"""
            ),
            {"ends": sorted(vocabulary.ends)},
        )
        found = stream_problems(streams)
        requests = conn.execute(
            text(
                """SELECT p.stream_id, r.type FROM events p
                LEFT JOIN events r ON r.stream_id = p.stream_id || '/request' AND r.seq = 0
                WHERE p.seq = 0 AND strpos(p.stream_id, '/') = 0
                  AND (r.type IS NULL OR r.type != :accepted)"""
            ),
            {"accepted": vocabulary.accepted},
        )
        found += request_problems(requests)
        cached = conn.execute(
            text(
                """SELECT key, completion_id FROM chat_cache c WHERE NOT EXISTS
                (SELECT 1 FROM events e WHERE e.stream_id = c.completion_id AND e.seq = 0)"""
            )
        )
        return found + cache_problems(cached)


def counts(conn: Connection) -> tuple[int, int]:
    """(streams, events) in the log."""
    streams, rows = conn.execute(
        text("SELECT count(DISTINCT stream_id), count(*) FROM events")
    ).one()
    return int(streams), int(rows)


def finished(
    conn: Connection,
    vocabulary: Vocabulary,
    before_ms: int,
    statuses: Iterable[str] | None = None,
) -> list[Finished]:
    """As SQLite's finished: objects that ended (and for a deleted one, its tombstone)
    before `before_ms`, oldest first, with the given statuses; never one still running."""
    paths = [(t, p) for t, p in sorted(vocabulary.ends.items()) if p.startswith("$.")]
    args: dict[str, object] = {
        "ends": sorted(vocabulary.ends),
        "dels": sorted(vocabulary.deleted),
        "before": before_ms,
    }
    said = ""
    for i, (type_, path) in enumerate(paths):
        said += f" WHEN :t{i} THEN omni_json(data) #>> CAST(:p{i} AS text[])"
        args[f"t{i}"], args[f"p{i}"] = type_, json_path(path)
    said = f"max(CASE type{said} END)" if paths else "NULL"
    done = "greatest(e.at, coalesce(d.at, 0))"
    args["closed"] = sorted(vocabulary.closed)
    closing = (  # objects a tombstone ends: deleted when it was written
        """
            UNION ALL
            SELECT substr(stream_id, 1, length(stream_id) - 8), NULL, NULL, TRUE, max(created_at)
            FROM events WHERE type = ANY(:closed)
              AND right(stream_id, 8) = '/request' GROUP BY stream_id
            HAVING max(created_at) < :before"""
        if vocabulary.closed
        else ""
    )
    rows = conn.execute(
        text(
            f"""WITH ended AS (
                SELECT stream_id AS id, max(created_at) AS at, max(type) AS type, {said} AS said
                FROM events WHERE type = ANY(:ends)
                  AND strpos(stream_id, '/') = 0 AND created_at < :before GROUP BY stream_id),
            deleted AS (
                SELECT substr(stream_id, 1, length(stream_id) - 8) AS id, max(created_at) AS at
                FROM events WHERE type = ANY(:dels)
                  AND right(stream_id, 8) = '/request' GROUP BY stream_id)
            SELECT e.id AS id, e.type, e.said, d.at IS NOT NULL, {done} AS done
            FROM ended e LEFT JOIN deleted d ON d.id = e.id
            WHERE {done} < :before{closing}
            ORDER BY done, id"""
        ),
        args,
    ).all()
    return finished_of(rows, vocabulary, statuses)


def count_events(conn: Connection, ids: Sequence[str]) -> int:
    sql = text("SELECT count(*) FROM events WHERE stream_id = ANY(:s)")
    return int(conn.execute(sql, {"s": streams_of(ids)}).scalar_one())


def purge(conn: Connection, ids: Sequence[str], per_transaction: int = PER_TRANSACTION) -> int:
    """Remove the objects `ids` whole, `per_transaction` at a time, each transaction holding
    the log's lock as an append does (their triggers' rows go with them)."""
    removed = 0
    for start in range(0, len(ids), per_transaction):
        with conn.begin():
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOG_LOCK})")
            doomed = streams_of(ids[start : start + per_transaction])
            result = conn.execute(_DELETE, {"s": doomed})
            removed += int(result.rowcount or 0)
    return removed


def vacuum(conn: Connection) -> None:
    """Make the deleted rows' space reusable now (PostgreSQL keeps its files' size: later
    appends fill it). Outside any transaction, as VACUUM must run."""
    conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
        "VACUUM (ANALYZE) events, items, chat_cache, summaries"
    )
