"""Fold a response's public events into the Response object a client retrieves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from omni.vocabulary import RESPONSE_ENDS, RESPONSE_LIFECYCLE


def fold_response(events: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(type, data) pairs in seq order → the Response as it stands after the last one."""
    response: dict[str, Any] = {}
    items: dict[int, dict[str, Any]] = {}
    for type_, data in events:
        event = json.loads(data)
        if type_ in RESPONSE_ENDS:
            return dict(event["response"])
        if type_ in RESPONSE_LIFECYCLE:
            response = dict(event["response"])
        elif type_ in ("response.output_item.added", "response.output_item.done"):
            items[event["output_index"]] = dict(event["item"])
        elif type_ == "response.content_part.added":
            item = items[event["output_index"]]
            item["content"] = [*item.get("content", []), dict(event["part"])]
        elif type_ in ("response.output_text.delta", "response.reasoning_text.delta"):
            part = items[event["output_index"]]["content"][event["content_index"]]
            part["text"] += event["delta"]
        elif type_ == "response.function_call_arguments.delta":
            item = items[event["output_index"]]
            item["arguments"] = item.get("arguments", "") + event["delta"]
    if response:
        response["output"] = [items[i] for i in sorted(items)]
    return response
