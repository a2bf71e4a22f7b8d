"""Build a response's events with the real (pure) recorder, as stored JSON text."""

from __future__ import annotations

import json
from typing import Any

from omni.ports.jobs import Output
from omni.protocol.recorder import ResponseRecorder


def base_response(response_id: str = "resp_test") -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1700000000,
        "status": "in_progress",
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": "tiny-llama",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }


def record(outputs: list[Output], response: dict[str, Any] | None = None, next_seq: int = 0):
    """(recorder, events) for opening + the given outputs, in order."""
    recorder = ResponseRecorder(response or base_response(), next_seq=next_seq)
    events = recorder.opening()
    for out in outputs:
        events += recorder.on_output(out)
    return recorder, events


def as_rows(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, data) pairs as the store holds them (JSON text)."""
    return [(e["type"], json.dumps(e, ensure_ascii=False, separators=(",", ":"))) for e in events]
