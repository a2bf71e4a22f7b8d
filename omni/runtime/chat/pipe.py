"""The scheduler's end of the pipe: what the server sends (jobs, cancels, a new batch size, the
close) taken in between steps, and between a solo job's prompt chunks."""

from __future__ import annotations

from multiprocessing.connection import Connection

from omni.runtime.chat.state import SchedulerState
from omni.runtime.chat.wire import Cancel, Close, MaxBatch, Spec


class Pipe(SchedulerState):
    """The scheduler's state, and what it takes in from the server."""

    def _receive(self, conn: Connection, wait_s: float | None) -> bool:
        """Take in what the server sent, waiting up to `wait_s` for the first message (None:
        for as long as it takes); False once it asks to close (or is gone)."""
        while conn.poll(wait_s):
            wait_s = 0
            match conn.recv():
                case Spec() as spec:
                    if not self.waiting:
                        self._oldest_wait = self.clock()
                    self.waiting.append(spec)
                    self._behind = spec.behind
                    self._arrivals += 1
                case Cancel(job_id):
                    self.stopping.add(job_id)
                case MaxBatch(size):
                    self.max_batch = size
                case Close():
                    return False
        return True

    def _heard_stop(self, job_id: int) -> None:
        """Between prompt chunks: take in what the server sent; stop if this job is cancelled."""
        if self._conn is not None and not self._receive(self._conn, 0):
            self._closing = True
        if self._closing or job_id in self.stopping:
            raise Stopped


class Stopped(Exception):
    """A solo job's prompt was cancelled between two chunks."""
