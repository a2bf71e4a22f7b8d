"""Cursor pages over a response's input items (GET /v1/responses/{id}/input_items)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from omni.errors import InvalidRequest


def page_items(
    items: Sequence[dict[str, Any]],
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> dict[str, Any]:
    ordered = list(items) if order == "asc" else list(reversed(items))
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise InvalidRequest(f"No input item with id {after!r}.", param="after")
        start = ids.index(after) + 1
    data = ordered[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else "",
        "last_id": data[-1]["id"] if data else "",
        "has_more": start + limit < len(ordered),
    }
