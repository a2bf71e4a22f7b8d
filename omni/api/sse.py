"""Server-sent events framing. Live and replayed frames come from the same stored bytes."""

from __future__ import annotations

import json

from omni.errors import OmniError

# A comment line with no blank line after it: a blank line would end an event, and the OpenAI
# SDK hands an ended event with no data but a remembered `id:` to json.loads, which fails.
KEEPALIVE_FRAME = b": keep-alive\n"


def frame(type_: str, data: str, seq: int) -> bytes:
    """One SSE frame: `event:`, `data:` (the stored JSON text), and `id:` for resuming."""
    return f"event: {type_}\ndata: {data}\nid: {seq}\n\n".encode()


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
