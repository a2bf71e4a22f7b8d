"""Server-sent events framing. Live and replayed frames come from the same stored bytes."""

from __future__ import annotations

KEEPALIVE_FRAME = b": keep-alive\n\n"


def frame(type_: str, data: str, seq: int) -> bytes:
    """One SSE frame: `event:`, `data:` (the stored JSON text), and `id:` for resuming."""
    return f"event: {type_}\ndata: {data}\nid: {seq}\n\n".encode()
