"""Server-sent events framing. Live and replayed frames come from the same stored bytes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from omni.errors import OmniError
from omni.vocabulary import COMPLETION_CANCELLED, COMPLETION_USAGE

# A comment line with no blank line after it: a blank line would end an event, and the OpenAI
# SDK hands an ended event with no data but a remembered `id:` to json.loads, which fails.
KEEPALIVE_FRAME = b": keep-alive\n"
DONE_FRAME = b"data: [DONE]\n\n"  # a completion's stream ends with it, after its last chunk
_UNSENT_USAGE = frozenset(COMPLETION_USAGE.values())


def frame(type_: str, data: str, seq: int) -> bytes:
    """One SSE frame: `event:`, `data:` (the stored JSON text), and `id:` for resuming."""
    return f"event: {type_}\ndata: {data}\nid: {seq}\n\n".encode()


def event_frame(data: dict[str, Any]) -> bytes:
    """One SSE frame of an event never stored (no `id:`): `event:` its type, `data:` it all."""
    text = json.dumps(data, separators=(",", ":"))
    return f"event: {data['type']}\ndata: {text}\n\n".encode()


def error_frame(exc: OmniError, seq: int) -> bytes:
    """OpenAI's `error` stream event, for a failure after the headers (never stored: the
    log could not be read or written)."""
    data = {
        "type": "error",
        "code": exc.code,
        "message": exc.message,
        "param": None,
        "sequence_number": seq,
    }
    return frame("error", json.dumps(data, separators=(",", ":")), seq)


def chunk_frames(events: Iterable[tuple[str, str]], include_usage: bool) -> bytes:
    """A completion's (type, data) events as its stream sends them: `data:` lines, without
    the cancel event (never sent) and, unless the client asked for it, the usage chunk."""
    return b"".join(
        b"data: " + data.encode() + b"\n\n"
        for type_, data in events
        if type_ != COMPLETION_CANCELLED and (include_usage or type_ not in _UNSENT_USAGE)
    )
