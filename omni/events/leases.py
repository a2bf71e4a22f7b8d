"""The statements of the leases (omni/events/contract.py's Leases) in SQLAlchemy Core, which
SQLite and PostgreSQL both run: each backend executes them in a transaction of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Delete, Select, Update, delete, select, update

from omni.events.schema import leases

# sqlalchemy.dialects.sqlite.insert or sqlalchemy.dialects.postgresql.insert: both have the
# upsert a claim needs.
Insert = Callable[[Any], Any]


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
