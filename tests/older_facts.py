"""A log whose accepted requests say nothing of `store`, as bench/inspection.py writes it (and
as a hand-built or older log may): a response still running when its server stopped, a
finished one and a chat completion. A server must start on it, and keep all three."""

from __future__ import annotations

import json
from typing import Any

from omni.events import Append, NewEvent
from omni.vocabulary import ACCEPTED

RUNNING = f"resp_{1:032x}"
FINISHED = f"resp_{2:032x}"
CHAT = f"chatcmpl-{3:032x}"
MODEL = "smollm2-135m"


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _response(rid: str, status: str) -> dict[str, Any]:
    return {
        "id": rid, "object": "response", "created_at": 1700000000, "status": status,
        "background": False, "error": None, "incomplete_details": None, "instructions": None,
        "metadata": {}, "model": MODEL, "output": [], "parallel_tool_calls": True,
        "previous_response_id": None, "store": True, "temperature": 1.0, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "usage": None,
    }  # fmt: skip


def _accepted_response(rid: str) -> str:
    """bench/inspection.py's accepted response: `store` only in the response, not the body."""
    item = {"id": f"msg_in_{rid[-28:]}", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Tell me a thing."}],
            "status": "completed"}  # fmt: skip
    return _dump(
        {
            "kind": "response",
            "body": {"model": MODEL, "input": "Tell me a thing."},
            "input": [item],
            "response": _response(rid, "in_progress"),
            "model_id": MODEL,
            "prompt_tokens": 31,
            "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 256},
        }
    )


def _lifecycle(rid: str, *ending: str) -> list[NewEvent]:
    types = ["response.created", "response.in_progress", *ending]
    events = []
    for seq, type_ in enumerate(types):
        status = "completed" if type_ == "response.completed" else "in_progress"
        data = {"type": type_, "sequence_number": seq, "response": _response(rid, status)}
        events.append(NewEvent(type_, _dump(data)))
    return events


def _chat() -> list[NewEvent]:
    head = {"id": CHAT, "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL}

    def chunk(delta: dict[str, str], finish: str | None = None) -> NewEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return NewEvent(
            "chat.completion.chunk", _dump({**head, "choices": [choice], "usage": None})
        )

    usage = {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "hello"}),
        chunk({}, "stop"),
        NewEvent("chat.completion.usage", _dump({**head, "choices": [], "usage": usage})),
    ]


def _accepted(request: str) -> list[NewEvent]:
    return [NewEvent(ACCEPTED, request)]


def appends() -> list[Append]:
    """The log, as appends."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    return [
        Append(f"{RUNNING}/request", 0, _accepted(_accepted_response(RUNNING))),
        Append(RUNNING, 0, _lifecycle(RUNNING)),
        Append(f"{FINISHED}/request", 0, _accepted(_accepted_response(FINISHED))),
        Append(FINISHED, 0, _lifecycle(FINISHED, "response.completed")),
        Append(f"{CHAT}/request", 0, _accepted(_dump({"kind": "chat", "body": chat}))),
        Append(CHAT, 0, _chat()),
    ]


def rows() -> list[tuple[str, int, str, str]]:
    """The log, as rows (stream_id, seq, type, data) for an INSERT into `events`."""
    return [
        (a.stream_id, a.first_seq + i, e.type, e.data)
        for a in appends()
        for i, e in enumerate(a.events)
    ]
