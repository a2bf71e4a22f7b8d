"""The engine process's end of the pipe, its sends made from a thread of its own.

Writing a step's outputs wakes the server's reader; on the H200's host that write took ~0.1 ms
a step in the engine's loop, time in which no decode step was being built. From a thread it
overlaps the next step's wait on the device (MLX lets go of the interpreter while it waits).
One thread sends, in the order the steps put their outputs; receiving stays with the loop.
"""

from __future__ import annotations

import queue
import threading
from multiprocessing.connection import Connection
from typing import Any


class Outbox:
    """A Connection's poll, recv and send for the scheduler (omni.runtime.batching), sends
    queued for the sending thread; `close` sends what is left and ends it."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._gone: BaseException | None = None  # why a send failed: the server is gone
        self._thread = threading.Thread(target=self._send_all, name="omni-engine-send", daemon=True)
        self._thread.start()

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self._conn.poll(timeout)

    def recv(self) -> Any:
        return self._conn.recv()

    def send(self, outputs: Any) -> None:
        """Queue `outputs` (which the caller no longer changes); EOFError once the server is
        gone, as a Connection's send would say."""
        if self._gone is not None:
            raise EOFError("the server is gone") from self._gone
        self._queue.put(outputs)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _send_all(self) -> None:
        while (outputs := self._queue.get()) is not None:
            try:
                self._conn.send(outputs)
            except (EOFError, OSError) as exc:
                self._gone = exc
                return
