"""Stop sequences on streamed text: hold back what may be the start of a stop string, so the
stop text itself is never emitted."""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string seen

    def feed(self, text: str) -> str:
        """Text that is safe to emit now; after a stop, the text before it and nothing more."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        buffer = self._held + text
        hits = [(i, s) for i, s in ((buffer.find(s), s) for s in self.stops) if i >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            self.stopped = True
            self._held = ""
            return buffer[:at]
        keep = self._partial(buffer)
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """At the end of generation: what was held back was not a stop after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial(self, buffer: str) -> int:
        """Length of the longest suffix of buffer that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:n]):
                    best = n
                    break
        return best
