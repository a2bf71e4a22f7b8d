"""`omni tail --summary`: what each stream did in the last second, one line a stream, instead
of one line an event (a token)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omni.inspect import TimelineRow
from omni.vocabulary import PREFILL_PROGRESS


@dataclass
class _Seen:
    events: int = 0
    deltas: int = 0
    chars: int = 0
    progress: str | None = None  # the latest "fed/total tokens fed"
    last: str = ""  # the latest event's type


@dataclass
class Digest:
    """Events gathered per stream until `lines` is asked for them, in the order they came."""

    seen: dict[str, _Seen] = field(default_factory=dict)

    def add(self, event: TimelineRow) -> None:
        at = self.seen.setdefault(event.stream_id, _Seen())
        at.events += 1
        at.last = event.type
        if event.type == PREFILL_PROGRESS:
            at.progress = event.text
        elif event.type.endswith(".delta") or event.type == "content_block_delta":
            at.deltas += 1
            at.chars += len(event.text or "")

    def lines(self) -> list[str]:
        """A line for each stream seen since the last call (then forgotten)."""
        out = []
        for stream, at in self.seen.items():
            parts = [f"{stream}  {at.events} event{'s' * (at.events != 1)}"]
            if at.deltas:
                parts.append(f"{at.deltas} deltas ({at.chars} chars)")
            if at.progress:
                parts.append(f"prefill {at.progress}")
            parts.append(f"last {at.last}")
            out.append(", ".join(parts))
        self.seen.clear()
        return out
