"""The PostgreSQL event store: the contract of omni/events/contract.py on a database that
several processes may share, on the connections of omni/events/postgres/connections.py (an
append holds the log's lock through its commit: positions grow in commit order). An append
is one round trip: lock, insert, notify and commit go together in psycopg's pipeline mode.

Each append's `pg_notify` (omni/events/postgres/listen.py) wakes followers in other
processes. There is no memory of recent rows here (SQLite's RecentRows): another process may
append to a stream (a cancel, say), and rows this store did not commit would be missing from
it, so every read asks the database (correctness first; a read is one pooled round trip).

A replica (`replica` set) appends only to streams no other replica leases: its lease may have
expired while it still ran the work (a stalled process, a slow database), and another replica
taken the stream over; its appends are refused from then on (LeaseLost), in the insert itself,
so a stream never has two writers.

Driver errors become StoreError; a duplicate (stream_id, seq) is a SeqConflict.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from typing import Any

from omni.errors import LeaseLost, StoreError
from omni.events.cache import CACHE_UPKEEP_ROWS
from omni.events.contract import Append, StoredEvent
from omni.events.driver import now_ms
from omni.events.maintenance import streams_of
from omni.events.notifier import Notifier
from omni.events.postgres.cache import INDEXED, PostgresCacheIndex
from omni.events.postgres.connections import PostgresConnections
from omni.events.postgres.leases import PostgresLeases
from omni.events.postgres.listen import CHANNEL, Listener
from omni.events.reads import SqlReads
from omni.location import conninfo, shown

_INSERT = (
    "INSERT INTO events (stream_id, seq, type, data, created_at)"
    " SELECT s, q, t, d, %s::bigint FROM unnest(%s::text[], %s::int[], %s::text[], %s::text[])"
    " AS u(s, q, t, d) RETURNING position, stream_id, seq"
)
# A replica's append: nothing at all if a stream of it is leased to another replica.
_FENCED_INSERT = _INSERT.replace(
    " RETURNING",
    " WHERE NOT EXISTS (SELECT 1 FROM leases WHERE stream_id = ANY(%s::text[]) AND owner <> %s)"
    " RETURNING",
)
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', s) FROM unnest(%s::text[]) AS s"
_DELETE = "DELETE FROM events WHERE stream_id = ANY(%s::text[])"


class PostgresStore(PostgresConnections, SqlReads):
    """The event log and its cache index (the contract's Store) in PostgreSQL. `notifier`:
    the process's Notifier, woken for commits made elsewhere (None: none listened for)."""

    def __init__(
        self,
        url: str,
        *,
        cache_max_entries: int = 1024,
        cache_max_age_s: float = 86400.0,
        notifier: Notifier | None = None,
        synchronous: str = "NORMAL",
        pool_size: int = 8,
    ):
        super().__init__(url, synchronous, cache_max_entries, cache_max_age_s, pool_size)
        self.cache = PostgresCacheIndex(self)  # in the same database, bounded in each append
        self.leases = PostgresLeases(self)  # who runs what, among replicas sharing the log
        self.replica: str | None = None  # the server's: its appends are fenced by the leases
        self._notifier = notifier
        self._listener: Listener | None = None

    async def open(self) -> None:
        self._connect()
        try:
            # The replay cache within its age and bound (lowered since the last start, or
            # expired meanwhile), all at once here rather than in the appends.
            await self.write_sql(self.cache.upkeep(now_ms(), None), "open")
            if self._notifier is not None:
                self._listener = Listener(conninfo(self.url), self._notifier, self._writer_pid)
                await self._listener.start()
        except BaseException as exc:
            await asyncio.shield(self.close())
            if isinstance(exc, StoreError):
                raise
            if isinstance(exc, Exception):
                raise StoreError(f"cannot open database {shown(self.url)}: {exc}") from exc
            raise

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await super().close()

    async def append(self, appends: Iterable[Append]) -> list[StoredEvent]:
        """Append to one or more streams in ONE transaction; all or nothing. The replay-cache
        index changes in the same transaction (the triggers), and is bounded there."""
        appends = list(appends)
        now = now_ms()
        rows = [
            (a.stream_id, a.first_seq + i, e.type, e.data)
            for a in appends
            for i, e in enumerate(a.events)
        ]
        if not rows:
            return []
        columns = [list(c) for c in zip(*rows, strict=True)]
        streams = list(dict.fromkeys(columns[0]))
        indexed = not INDEXED.isdisjoint(columns[2])
        upkeep = self.cache.upkeep(now, CACHE_UPKEEP_ROWS) if indexed else []

        async def insert(conn: Any) -> Any:
            cursor = conn.cursor()
            if self.replica is None:
                await cursor.execute(_INSERT, (now, *columns))
            else:
                await cursor.execute(_FENCED_INSERT, (now, *columns, streams, self.replica))
            await conn.execute(_NOTIFY, (streams,))  # delivered at the commit, to listeners
            for sql, params in upkeep:
                for p in params:
                    await conn.execute(sql, p)
            return cursor  # read once the pipeline is through (one round trip in all)

        cursor = await self._write(insert, "append")
        positions = {(sid, seq): pos for pos, sid, seq in await cursor.fetchall()}
        if len(positions) < len(rows):  # fenced: nothing was inserted
            raise LeaseLost(f"append to {', '.join(streams)} refused: leased to another server")
        return [
            StoredEvent(positions[(sid, seq)], sid, seq, type_, data, now)
            for sid, seq, type_, data in rows
        ]

    async def _delete(self, stream_ids: list[str]) -> int:
        async def delete(conn: Any) -> Any:
            cursor = conn.cursor()
            await cursor.execute(_DELETE, (stream_ids,))
            return cursor

        return int((await self._write(delete, "purge")).rowcount) if stream_ids else 0

    async def purge(self, stream_ids: Sequence[str]) -> int:
        """Remove whole streams on purpose (store:false streams once nobody reads them)."""
        return await self._delete(list(stream_ids))

    async def purge_objects(self, ids: Sequence[str]) -> int:
        """Remove finished objects whole (their streams, and so their index rows) in one
        transaction: retention. Returns the events removed."""
        return await self._delete(streams_of(ids))

    async def streams_with(self, type_: str, facts: Sequence[tuple[str, object]]) -> list[str]:
        """As SQLite's json_extract reads them: true and false as 1 and 0, a string as text."""
        if not facts:
            return []
        held, params = [], []
        for path, value in facts:
            if isinstance(value, bool | int):
                held.append("omni_int(e.doc #> %s::text[]) = %s")
                params += [json_path(path), int(value)]
            else:
                held.append("e.doc #>> %s::text[] = %s")
                params += [json_path(path), str(value)]
        sql = (
            "SELECT e.stream_id FROM (SELECT stream_id, position, omni_json(data) AS doc"
            f" FROM events WHERE type = %s) AS e WHERE {' OR '.join(held)} ORDER BY e.position"
        )
        return [row[0] for row in await self.fetch_sql(sql, (type_, *params))]


def json_path(path: str) -> list[str]:
    """'$.choices[0].text' → ['choices', '0', 'text'] (a jsonb path's keys)."""
    return [name or index for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", path[1:])]
