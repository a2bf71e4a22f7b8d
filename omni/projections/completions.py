"""Fold a completion's chunk events into the non-streaming object (chat or legacy text)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def _chunks(events: Sequence[tuple[str, str]]) -> tuple[dict[str, Any], list[Any], Any]:
    """The first chunk (id, created, model), every choice in order, and the usage."""
    head: dict[str, Any] = {}
    choices: list[dict[str, Any]] = []
    usage = None
    for _type, data in events:
        chunk = json.loads(data)
        if "id" not in chunk:  # an error or cancel event: no chunk
            continue
        head = head or chunk
        choices += chunk["choices"]
        usage = chunk.get("usage") or usage
    return head, choices, usage


def _finish_reason(choices: list[dict[str, Any]]) -> str | None:
    return next((c["finish_reason"] for c in reversed(choices) if c.get("finish_reason")), None)


def fold_chat(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs → a `chat.completion` object: the fold of its chunks."""
    head, choices, usage = _chunks(events)
    scored = [c["logprobs"]["content"] for c in choices if c.get("logprobs") is not None]
    # The content as the chunks carried it: a stream that may call a tool opens with a null
    # content (a text answer with ""), and stays null unless text follows.
    deltas = [c["delta"] for c in choices]
    said = [d["content"] for d in deltas if isinstance(d.get("content"), str)]
    null = any("content" in d and d["content"] is None for d in deltas)
    content = None if null and not said else "".join(said)
    calls = [call for c in choices for call in c["delta"].get("tool_calls") or []]
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    reasoning = "".join(c["delta"].get("reasoning_content") or "" for c in choices)
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["content"] = content or None
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": c["function"]} for c in calls
        ]
    return {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {"content": sum(scored, []), "refusal": None} if scored else None,
                "finish_reason": _finish_reason(choices),
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
        "service_tier": "default",
    }


def fold_text(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs → a legacy `text_completion` object."""
    head, choices, usage = _chunks(events)
    logprobs: dict[str, list[Any]] | None = None
    for choice in choices:
        if choice.get("logprobs") is not None:
            logprobs = logprobs or {k: [] for k in choice["logprobs"]}
            for key, values in choice["logprobs"].items():
                logprobs[key] += values
    return {
        "id": head.get("id"),
        "object": "text_completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [
            {
                "index": 0,
                "text": "".join(c["text"] for c in choices),
                "logprobs": logprobs,
                "finish_reason": _finish_reason(choices),
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
    }
