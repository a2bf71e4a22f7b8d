"""Fold a completion's chunk events into the non-streaming object (chat or legacy text)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def fold_chat(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs → a `chat.completion` object: the fold of its chunks."""
    head: dict[str, Any] = {}
    content: list[str] = []
    logprobs: list[dict[str, Any]] | None = None
    finish_reason = None
    usage = None
    for _type, data in events:
        chunk = json.loads(data)
        if "error" in chunk or "id" not in chunk:
            continue
        head = head or chunk
        if chunk["choices"]:
            choice = chunk["choices"][0]
            content.append(choice["delta"].get("content") or "")
            if choice.get("logprobs") is not None:
                logprobs = (logprobs or []) + choice["logprobs"]["content"]
            finish_reason = choice.get("finish_reason") or finish_reason
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
    return {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(content), "refusal": None},
                "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
        "service_tier": "default",
    }


def fold_text(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs → a legacy `text_completion` object."""
    head: dict[str, Any] = {}
    text: list[str] = []
    logprobs: dict[str, list[Any]] | None = None
    finish_reason = None
    usage = None
    for _type, data in events:
        chunk = json.loads(data)
        if "error" in chunk or "id" not in chunk:
            continue
        head = head or chunk
        if chunk["choices"]:
            choice = chunk["choices"][0]
            text.append(choice["text"])
            if choice.get("logprobs") is not None:
                logprobs = logprobs or {k: [] for k in choice["logprobs"]}
                for key, values in choice["logprobs"].items():
                    logprobs[key] += values
            finish_reason = choice.get("finish_reason") or finish_reason
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
    return {
        "id": head.get("id"),
        "object": "text_completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [
            {
                "index": 0,
                "text": "".join(text),
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
    }
