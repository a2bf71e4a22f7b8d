"""Which server works on what, where several servers share one log (PostgreSQL).

Each server has an id (its replica). A generation's stream is leased to it before its work
starts and the lease is renewed while it runs; it is let go once the work is over. Start-up
recovery, and any server's watch once a lease has expired (its owner died or lost the
database), take only streams whose lease is gone or expired: a background response is
continued from its recorded tokens, a foreground one ended `failed`, as after a restart.

On SQLite one server owns the log (its file lock says so), so everything unfinished at its
start is its own: `shared` is off and leases cost nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from omni.errors import StoreError
from omni.events.contract import Leases
from omni.events.driver import now_ms

log = logging.getLogger(__name__)

LEASE_S = 10.0  # a dead server's work waits this long at most before another takes it


def replica_id() -> str:
    """A name for this server: its host, its process and a random part (a restarted server
    is a new replica: what the old one held expires)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Leasing:
    def __init__(
        self,
        leases: Leases | None = None,
        replica: str | None = None,
        lease_s: float = LEASE_S,
        shared: bool = False,
    ):
        self.leases = leases
        self.replica = replica or replica_id()
        self.shared = shared and leases is not None
        self.ttl_ms = int(lease_s * 1000)
        self._task: asyncio.Task[None] | None = None

    async def claim(self, stream_id: str) -> None:
        """Lease a new stream before its work starts (its id is new: nobody else holds it)."""
        if self.shared and self.leases is not None:
            if not await self.leases.claim([stream_id], self.replica, self.ttl_ms):
                raise StoreError(f"{stream_id} is leased to another server")

    async def lead(self, name: str) -> bool:
        """Whether this server leads the work `name` stands for (a replay-cache key, say):
        True where it took the lease (or no other server could hold it), False where
        another server holds it now. Let go with release(), or by expiry if this one dies."""
        if not self.shared or self.leases is None:
            return True
        return bool(await self.leases.claim([name], self.replica, self.ttl_ms))

    async def holder(self, name: str) -> str | None:
        """The server holding `name`'s lease now, if any (expired leases hold nothing)."""
        if not self.shared or self.leases is None:
            return None
        held = await self.leases.holder(name)
        return held[0] if held is not None and held[1] > now_ms() else None

    async def takeable(self, stream_ids: Sequence[str]) -> list[str]:
        """Of unfinished streams, those this server may take over (leased to it now)."""
        if not self.shared or self.leases is None or not stream_ids:
            return list(stream_ids)
        taken = await self.leases.claim(stream_ids, self.replica, self.ttl_ms)
        if taken:  # an old owner's last appends, begun before the claim, are in the log first
            await self.leases.settle()
        return taken

    @asynccontextmanager
    async def taking(
        self,
        unfinished: Sequence[str],
        among: Sequence[str] | None = None,
        keep: Callable[[str], bool] = lambda stream_id: False,
    ) -> AsyncIterator[list[str]]:
        """A recovery's streams: of `unfinished` (only those `among` these, if given), what
        this server may take, leased for the block and let go after it, except those `keep`
        says go on running here (their run lets go when it ends)."""
        if among is not None:
            wanted = set(among)
            unfinished = [s for s in unfinished if s in wanted]
        taken = await self.takeable(unfinished)
        try:
            yield taken
        finally:
            await self.release([s for s in taken if not keep(s)])

    async def release(self, stream_ids: Sequence[str]) -> None:
        if self.shared and self.leases is not None and stream_ids:
            try:
                await self.leases.release(stream_ids, self.replica)
            except StoreError as exc:  # it expires by itself
                log.warning("could not let go of %d leases: %s", len(stream_ids), exc)

    def start(self, take_over: Callable[[list[str]], Awaitable[None]]) -> None:
        """Renew this server's leases, and take over expired ones, until close()."""
        if self.shared and self._task is None:
            self._task = asyncio.create_task(self._watch(take_over), name="omni-leases")

    async def _watch(self, take_over: Callable[[list[str]], Awaitable[None]]) -> None:
        assert self.leases is not None
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                await self.leases.renew(self.replica, self.ttl_ms)
                renewed = self._renewed(renewed)
                if expired := await self.leases.expired():
                    taken = await self.leases.claim(expired, self.replica, self.ttl_ms)
                    if taken:
                        log.warning("taking over %d streams whose server stopped", len(taken))
                        await take_over(taken)
            except StoreError as exc:
                log.warning("lease upkeep failed: %s", exc)
            except Exception:
                log.exception("lease upkeep failed")

    def _renewed(self, last: float) -> float:
        """Warn of renewals that come late: a lease that lapses while its work still runs
        here is taken over by another server (and this one's appends to it are refused)."""
        now = time.monotonic()
        if now - last > self.ttl_ms / 1500:  # two thirds of a lease went unrenewed
            log.warning(
                "leases renewed %.1f s after the last renewal (they last %.1f s): this server "
                "or its database is slow to answer; a longer --lease keeps its work here",
                now - last,
                self.ttl_ms / 1000,
            )
        return now

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
