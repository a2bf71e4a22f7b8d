"""Generation requests the server is taking in: arrived over HTTP, their job not yet handed to
the engine.

Requests sent at once cross the event loop one after another (HTTP, validation, the template,
the records: ~5 ms each on the H200's host, bench/README.md), so their jobs reach the engine
apart. Each job says how many others were still being taken in as it left (Job.behind): an
idle engine then waits for them and prefills them together, as if they had come at once,
instead of starting the first alone (omni.runtime.batching, BatchScheduler._expecting). A
request counts from the start of its handler, its body still arriving included: the engine
never waits longer than its gathering window (50 ms) for one that is slow to come.

A run whose job has left commits its opening once the others are in (`settled`): its commit,
its response's start and its SSE would otherwise take the event loop from the requests still
being taken in, and the engine waits for the last of them. Done while the engine prefills,
they cost the first token nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class _Ticket:
    open: bool = True


# The ticket of the request this task serves (tasks it starts share it).
_current: ContextVar[_Ticket | None] = ContextVar("omni_intake_ticket", default=None)


# The longest a run whose job has left waits for the others to be taken in (settled) before
# it commits its opening. On the H200's host 8 requests sent at once are all at the engine
# ~9.5 ms after the first reaches the app (bench/README.md, intake); a request whose body is
# slow to come holds the others' first tokens back by this much at most.
SETTLE_S = 0.02


class Intake:
    def __init__(self, settle_s: float | None = None) -> None:
        self.taking = 0  # requests taken in whose job has not left for the engine
        # Benchmarks compare with OMNI_SETTLE_MS=0 (no waiting).
        ms = os.environ.get("OMNI_SETTLE_MS", "").strip()
        self.settle_s = settle_s if settle_s is not None else float(ms) / 1000 if ms else SETTLE_S
        self._quiet: asyncio.Event | None = None  # set once none is being taken in

    @contextmanager
    def request(self) -> Iterator[None]:
        """One request's intake, from its arrival until its handler returns (it leaves
        earlier, at `handed`, when it makes a job)."""
        ticket = _Ticket()
        self.taking += 1
        token = _current.set(ticket)
        try:
            yield
        finally:
            _current.reset(token)
            self._close(ticket)

    def handed(self) -> int:
        """The current request's job leaves for the engine: it is no longer taken in. How
        many others still are."""
        ticket = _current.get()
        if ticket is not None:
            self._close(ticket)
        return self.taking

    async def settled(self) -> None:
        """Wait until no other request is being taken in, `settle_s` at most."""
        if self.taking == 0 or self.settle_s <= 0:
            return
        if self._quiet is None:
            self._quiet = asyncio.Event()
        try:
            async with asyncio.timeout(self.settle_s):
                await self._quiet.wait()
        except TimeoutError:
            pass

    def _close(self, ticket: _Ticket) -> None:
        if ticket.open:
            ticket.open = False
            self.taking -= 1
            if self.taking == 0 and self._quiet is not None:
                self._quiet.set()
                self._quiet = None
