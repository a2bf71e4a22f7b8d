"""The leases (omni/events/contract.py's Leases) in SQLAlchemy Core, which SQLite and
PostgreSQL both run: the statements, and what a claim or a read makes of their rows. Each
backend runs a write in a transaction of its own (omni/events/sqlite/leases.py,
omni/events/postgres/leases.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import Delete, Select, Update, delete, select, update

from omni.events.driver import now_ms
from omni.events.schema import leases

# sqlalchemy.dialects.sqlite.insert or sqlalchemy.dialects.postgresql.insert: both have the
# upsert a claim needs.
Insert = Callable[[Any], Any]
# One query on the store's read connections: its rows.
Fetch = Callable[[Any], Awaitable[list[Any]]]


def claim(insert: Insert, stream_ids: Sequence[str], owner: str, now: int, ttl_ms: int) -> Any:
    """One statement: a lease for each stream nobody holds, or whose lease has expired, or
    that `owner` holds already; RETURNING names the streams taken."""
    rows = [{"stream_id": s, "owner": owner, "expires_at": now + ttl_ms} for s in stream_ids]
    statement = insert(leases).values(rows)
    return statement.on_conflict_do_update(
        index_elements=[leases.c.stream_id],
        set_={"owner": statement.excluded.owner, "expires_at": statement.excluded.expires_at},
        where=(leases.c.expires_at < now) | (leases.c.owner == statement.excluded.owner),
    ).returning(leases.c.stream_id)


def renew(owner: str, now: int, ttl_ms: int) -> Update:
    return update(leases).where(leases.c.owner == owner).values(expires_at=now + ttl_ms)


def release(stream_ids: Sequence[str], owner: str) -> Delete:
    return delete(leases).where(leases.c.stream_id.in_(stream_ids), leases.c.owner == owner)


def expired(now: int) -> Select[Any]:
    return (
        select(leases.c.stream_id)
        .where(leases.c.expires_at < now)
        .order_by(leases.c.expires_at, leases.c.stream_id)
    )


def holder(stream_id: str) -> Select[Any]:
    return select(leases.c.owner, leases.c.expires_at).where(leases.c.stream_id == stream_id)


class SqlLeases(ABC):
    """The contract's Leases over a backend's `_run` (one write statement, committed alone:
    its rows and its row count) and `fetch` (one read)."""

    def __init__(self, insert: Insert, fetch: Fetch):
        self._insert = insert
        self._fetch = fetch

    @abstractmethod
    async def _run(self, statement: Any) -> tuple[list[Any], int]: ...

    @abstractmethod
    async def settle(self) -> None:
        """Return once every append other servers began before this call is through."""

    async def claim(self, stream_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        if not stream_ids:
            return []
        # Rows locked in one order by every claimant: two claims of many never deadlock.
        ordered = sorted(set(stream_ids))
        rows, _ = await self._run(claim(self._insert, ordered, owner, now_ms(), ttl_ms))
        taken = {str(row[0]) for row in rows}
        return [s for s in stream_ids if s in taken]

    async def renew(self, owner: str, ttl_ms: int) -> int:
        _, count = await self._run(renew(owner, now_ms(), ttl_ms))
        return count

    async def release(self, stream_ids: Sequence[str], owner: str) -> None:
        if stream_ids:
            await self._run(release(sorted(set(stream_ids)), owner))

    async def expired(self) -> list[str]:
        return [str(row[0]) for row in await self._fetch(expired(now_ms()))]

    async def holder(self, stream_id: str) -> tuple[str, int] | None:
        rows = await self._fetch(holder(stream_id))
        return (str(rows[0][0]), int(rows[0][1])) if rows else None
