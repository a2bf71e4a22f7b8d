"""Input items that stand for stored ones: `{"type": "item_reference", "id": "msg_…"}` is an
item of an earlier stored response of the same owner, one of its input or output items. The
Vercel AI SDK sends its earlier turns so by default (`store: true`, its assistant messages and
reasoning as references).

A reference is replaced by the item it names, id kept, normalised as if the client had sent
the item itself, before anything reads the input: the prompt, `input_items` (which lists the
item, as OpenAI does), a chained `previous_response_id` and a restart all see the item, never
the reference. An id the caller cannot see (unknown, another owner's, of a deleted or
unstored response, or of no response) is a 400 naming `input[i]`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from omni.errors import InvalidRequest, NotFound
from omni.schemas.items import ITEM_REFERENCE, normalize_item

# The objects whose events hold an item id, oldest first (EventLog.item_holders).
Holders = Callable[[str], Awaitable[list[str]]]
# The items (input, then output) of a stored response the caller may see, else NotFound.
Items = Callable[[str], Awaitable[list[dict[str, Any]]]]


async def resolve(
    items: Sequence[dict[str, Any]], holders: Holders, items_of: Items
) -> list[dict[str, Any]]:
    """`items` with every reference replaced by the stored item it names, else 400."""
    seen: dict[str, list[dict[str, Any]]] = {}  # each response read once per request
    resolved = []
    for i, item in enumerate(items):
        if item["type"] != ITEM_REFERENCE:
            resolved.append(item)
            continue
        param = f"input[{i}]"
        found = await _find(item["id"], holders, items_of, seen)
        if found is None:
            raise InvalidRequest(f"Item with id '{item['id']}' not found.", param=param)
        resolved.append(normalize_item(found, param))
    return resolved


async def _find(
    item_id: str, holders: Holders, items_of: Items, seen: dict[str, list[dict[str, Any]]]
) -> dict[str, Any] | None:
    """The item from the first response holding it that the caller may see: the one that
    made it, unless that one is gone and a later one carries a copy."""
    for holder in await holders(item_id):
        if holder not in seen:
            try:
                seen[holder] = await items_of(holder)
            except NotFound:
                seen[holder] = []
        for item in seen[holder]:
            if item.get("id") == item_id:
                return item
    return None
