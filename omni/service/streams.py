"""Names and event types of the streams a response owns, and the JSON bytes we store.

`resp_X` is the public stream (exactly what the API streams); `resp_X/request` holds the
accepted request, cancel requests and the delete tombstone; `resp_X/tokens` holds the token
ids of a background generation, so a restart can carry it on exactly.
"""

from __future__ import annotations

import json
from typing import Any

from omni.events import StoredEvent
from omni.vocabulary import ID_PREFIXES, RESPONSE, RESPONSE_ENDS


def dumps(value: Any) -> str:
    """Compact JSON, the exact bytes stored and sent."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_stream(response_id: str) -> str:
    return f"{response_id}/request"


def tokens_stream(response_id: str) -> str:
    return f"{response_id}/tokens"


def progress_stream(response_id: str) -> str:
    """A long prefill's progress (omni.prefill.progress), for people watching it."""
    return f"{response_id}/progress"


def is_kind(object_id: str, request: dict[str, Any], kind: str) -> bool:
    """Whether `object_id`, whose accepted request is `request`, is an object of `kind`: its
    id's prefix and its recorded kind must both say so."""
    recorded = request.get("kind", RESPONSE)  # responses accepted before kinds were recorded
    return recorded == kind and object_id.startswith(ID_PREFIXES[kind])


def kept(request: dict[str, Any]) -> bool:
    """Whether the object of accepted `request` is kept: its body's `store`. A fact without
    one (a hand-built or older log) is kept: purging on an ambiguous fact cannot be undone."""
    return bool(request["body"].get("store", True))


def is_terminal(event: StoredEvent) -> bool:
    return event.type in RESPONSE_ENDS
