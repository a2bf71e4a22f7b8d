"""Names and event types of the streams a response owns, and the JSON bytes we store.

`resp_X` is the public stream (exactly what the API streams); `resp_X/request` holds the
accepted request, cancel requests and the delete tombstone; `resp_X/tokens` holds the token
ids of a background generation, so a restart can carry it on exactly.
"""

from __future__ import annotations

import json
from typing import Any

from omni.events import StoredEvent
from omni.schemas.stream import TERMINAL_TYPES

ACCEPTED = "omni.request.accepted"
CANCEL_REQUESTED = "omni.response.cancel_requested"
DELETED = "omni.response.deleted"
TOKENS = "omni.tokens"
METADATA_UPDATED = "omni.completion.metadata_updated"
COMPLETION_DELETED = "omni.completion.deleted"


def dumps(value: Any) -> str:
    """Compact JSON, the exact bytes stored and sent."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_stream(response_id: str) -> str:
    return f"{response_id}/request"


def tokens_stream(response_id: str) -> str:
    return f"{response_id}/tokens"


def is_terminal(event: StoredEvent) -> bool:
    return event.type in TERMINAL_TYPES
