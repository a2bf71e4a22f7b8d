"""A non-streamed answer of a generation: its events read to the end; the generation stopped
if the client goes first, and let go either way (an unstored one may go then)."""

from __future__ import annotations

import json
from typing import Protocol

from omni.errors import OmniError
from omni.events import StoredEvent


class Followed(Protocol):
    """A service whose generations are read to their end (completions, messages)."""

    async def wait(self, stream_id: str, /) -> list[StoredEvent]: ...

    def cancel_running(self, stream_id: str, /) -> None: ...

    def release(self, stream_id: str, /) -> None: ...


async def read_to_end(service: Followed, stream_id: str, failed: str) -> list[StoredEvent]:
    """Every event of `stream_id`; an ending of type `failed` is raised as its error."""
    finished = False
    try:
        events = await service.wait(stream_id)
        finished = True
    finally:
        if not finished:
            service.cancel_running(stream_id)
        service.release(stream_id)
    if events[-1].type == failed:
        raise OmniError(json.loads(events[-1].data)["error"]["message"])
    return events
