"""Generation requests the server is taking in: arrived over HTTP, their job not yet handed to
the engine.

Requests sent at once cross the event loop one after another (HTTP, validation, the template,
the records: ~5 ms each on the H200's host, bench/README.md), so their jobs reach the engine
apart. Each job says how many others were still being taken in as it left (Job.behind): an
idle engine then waits for them and prefills them together, as if they had come at once,
instead of starting the first alone (omni.runtime.chat.gathering, Gathering._expecting). A
request counts from the start of its handler, its body still arriving included: the engine
never waits longer than its gathering window (50 ms) for one that is slow to come.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class _Ticket:
    open: bool = True


# The ticket of the request this task serves (tasks it starts share it).
_current: ContextVar[_Ticket | None] = ContextVar("omni_intake_ticket", default=None)


class Intake:
    def __init__(self) -> None:
        self.taking = 0  # requests taken in whose job has not left for the engine

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

    def _close(self, ticket: _Ticket) -> None:
        if ticket.open:
            ticket.open = False
            self.taking -= 1
