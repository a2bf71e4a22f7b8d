"""Whether the server takes new work, the requests on their way in, and its graceful stop: what
every endpoint asks before it starts anything. The generations themselves are ended (or left
for the next start) by the runs that record them (omni.service.runs, Runs.drain)."""

from __future__ import annotations

import asyncio

from omni.errors import ShuttingDown
from omni.events import Notifier
from omni.service.intake import Intake
from omni.service.runs import Runs
from omni.settings import ServerSettings


class Lifecycle:
    def __init__(
        self, runs: Runs, notifier: Notifier, grace_s: float = ServerSettings.shutdown_grace_s
    ) -> None:
        self._runs = runs
        self._notifier = notifier
        self.grace_s = grace_s  # for running generations to end, once a stop is asked
        self.stopping: asyncio.Task[None] | None = None  # the graceful stop, once begun
        self.stopped_serving = asyncio.Event()  # set once a stop's endings are committed

    @property
    def closing(self) -> bool:
        """The server is stopping: it takes no new work."""
        return self._runs.closing

    @property
    def intake(self) -> Intake:
        """Generation requests on their way to the engine (omni.service.intake)."""
        return self._runs.intake

    def refuse_if_closing(self) -> None:
        """A 503 for new work once the server is stopping."""
        if self.closing:
            raise ShuttingDown("The server is shutting down; retry shortly.")

    def stop(self) -> asyncio.Task[None]:
        """Begin (or join) the graceful stop: new work is refused at once, running generations
        get the grace to end, then foreground ones are ended and background ones left for the
        next start (Runs.drain). Done when every ending is committed; the streams that follow
        responses then end after their last committed event, and their connections close."""
        if self.stopping is None:
            self.stopping = asyncio.create_task(self._stop(), name="omni-shutdown")
        return self.stopping

    async def _stop(self) -> None:
        await self._runs.drain(self.grace_s)
        # Every ending is committed: the streams of what goes on at the next start end now, on
        # a frame boundary and with a whole body, rather than cut when Hypercorn stops waiting.
        self._notifier.stop()
        self.stopped_serving.set()  # and idle WebSockets close, rather than wait to be cut

    async def stopped(self) -> None:
        """Wait for a stop a signal began, if any."""
        if self.stopping is not None:
            await self.stopping
