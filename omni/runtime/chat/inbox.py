"""The server's messages to a model process that does one request at a time (the transcriber,
the speaker), read between the pieces of the request under way too: a cancel (or the close
of the process) stops it at its next piece, and any other request that came meanwhile
waits its turn, in order."""

from __future__ import annotations

from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from omni.runtime.chat.wire import Cancel


class Inbox:
    def __init__(self, conn: Connection, closing: type):
        self.conn = conn
        self._closing = closing
        self._waiting: deque[Any] = deque()
        self._cancelled: set[int] = set()  # requests waiting here whose cancel came already
        self._current: int | None = None
        self._stop = False

    def next(self) -> Any:
        """The next request (or the close), waiting for it."""
        while True:
            message = self._waiting.popleft() if self._waiting else self.conn.recv()
            if isinstance(message, Cancel):
                continue  # its request is over: nothing to stop
            self._current = getattr(message, "id", None)
            self._stop = self._current in self._cancelled
            self._cancelled.discard(self._current)
            return message

    def cancelled(self) -> bool:
        """Whether the request under way is to stop (reading what has come meanwhile)."""
        while self.conn.poll():
            message = self.conn.recv()
            if isinstance(message, Cancel):
                if message.id == self._current:
                    self._stop = True
                elif any(getattr(m, "id", None) == message.id for m in self._waiting):
                    self._cancelled.add(message.id)
            else:
                self._stop = self._stop or isinstance(message, self._closing)
                self._waiting.append(message)
        return self._stop
