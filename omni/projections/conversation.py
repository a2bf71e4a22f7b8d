"""A conversation's items, folded from its stream `conv_X`: each added, maybe deleted later."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from omni.vocabulary import CONVERSATION_ITEM_ADDED, CONVERSATION_ITEM_DELETED


def fold_items(events: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The items, in the order added, less those deleted (an id added twice: its first)."""
    items: dict[str, dict[str, Any]] = {}
    for type_, data in events:
        if type_ == CONVERSATION_ITEM_ADDED:
            item = json.loads(data)["item"]
            items.setdefault(item["id"], item)
        elif type_ == CONVERSATION_ITEM_DELETED:
            items.pop(json.loads(data)["item_id"], None)
    return list(items.values())
