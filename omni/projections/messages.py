"""Fold a message's stream events into Anthropic's `message` object: what the non-streamed
call returns, and what the SDKs' stream helpers assemble from the same events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from omni.vocabulary import BLOCK_DELTA, BLOCK_START, MESSAGE_DELTA, MESSAGE_START

# A delta's type → the field of its block it adds to.
_APPENDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "input_json_delta": "partial_json",
}


def fold_message(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs → the `message` (its blocks as far as the events go)."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    for type_, data in events:
        event = json.loads(data)
        if type_ == MESSAGE_START:
            message = dict(event["message"])
        elif type_ == BLOCK_START:
            blocks.append(dict(event["content_block"]))
        elif type_ == BLOCK_DELTA:
            delta = event["delta"]
            field = _APPENDS[delta["type"]]
            block = blocks[event["index"]]
            block[field] = block.get(field, "") + delta[field]
        elif type_ == MESSAGE_DELTA:
            message.update(event["delta"])
            message["usage"] = {**message.get("usage", {}), **event["usage"]}
    for block in blocks:
        if block["type"] == "tool_use":
            block["input"] = _input(block.pop("partial_json", ""))
    return {**message, "content": blocks}


def _input(arguments: str) -> Any:
    """A tool call's input: its arguments' JSON (a call's arguments are written whole)."""
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
