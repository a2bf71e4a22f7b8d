"""A compacted window: what a `compaction` item seals and what it stands for in a prompt.

A compaction item replaces every item before it: it seals a summary the model wrote of them
(as a developer message, which templates put first), the latest user messages as they were
written, and whatever came after the last of them (a turn's calls and their outputs). A
prompt renders the latest compaction item as that window, keeps the system and developer
messages before it (instructions the summary does not carry) and drops the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from omni.ids import new_id
from omni.projections.template_messages import SYSTEM_ROLES, item_text
from omni.schemas.responses import ContextManagement

COMPACTION = "compaction"
COMPACTION_TRIGGER = "compaction_trigger"  # a create's last item: the response is a compaction
# Omni's own prompt for the summary, sent after the conversation as a user message.
SUMMARY_PROMPT = (
    "Write a short summary of the conversation so far, for yourself to continue from: its "
    "context is about to be replaced by this summary and the user's own messages. List every "
    "fact, name, number, file path, decision, result and open task it mentions, exactly as "
    "written. Write only the summary."
)
SUMMARY_HEADER = (
    "Summary of the earlier conversation (its context was compacted; the user's latest "
    "messages follow as they were written):\n"
)
SUMMARY_TOKENS = 512  # the most a summary may take


Opener = Callable[[str], list[dict[str, Any]]]  # a compaction item's encrypted_content → items


def latest(items: Sequence[dict[str, Any]]) -> int | None:
    """The index of the latest compaction item, if any."""
    for i in range(len(items) - 1, -1, -1):
        if items[i]["type"] == COMPACTION:
            return i
    return None


def window(
    history: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]], open_: Opener
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The earlier items and the request's own, as a prompt renders them: from the latest
    compaction item on (among either), that item opened into its window."""
    whole = [*history, *items]
    last = latest(whole)
    if last is None:
        return list(history), list(items)
    instructions = [item for item in whole[:last] if _is_message(item, *SYSTEM_ROLES)]
    opened = [*instructions, *open_(whole[last]["encrypted_content"])]
    if last < len(history):
        return [*opened, *history[last + 1 :]], list(items)
    return [], [*opened, *whole[last + 1 :]]


def sealed_window(
    conversation: Sequence[dict[str, Any]], summary: str, budget: int
) -> list[dict[str, Any]]:
    """What a compaction of `conversation` (as a prompt renders it) seals: the summary, the
    latest user messages whose text fits `budget` bytes (the last one always), oldest first,
    then every item after the last of them."""
    users = [i for i, item in enumerate(conversation) if _is_message(item, "user")]
    tail = list(conversation[users[-1] + 1 :]) if users else []
    kept: list[dict[str, Any]] = []
    size = 0
    for i in reversed(users):
        size += len(item_text(conversation[i]).encode())
        if kept and size > budget:
            break
        kept.insert(0, conversation[i])
    return [summary_message(summary), *kept, *tail]


def summary_message(summary: str) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": SUMMARY_HEADER + summary.strip()}],
        "status": "completed",
    }


def summary_request() -> dict[str, Any]:
    """The user message that asks for the summary, after the conversation."""
    return {"type": "message", "role": "user", "content": SUMMARY_PROMPT}


def threshold(entries: Sequence[ContextManagement], context_length: int) -> int | None:
    """The prompt tokens past which `context_management` compacts: its compaction entry's
    `compact_threshold`, else nine tenths of the context."""
    for entry in entries:
        given = entry.compact_threshold
        return given if given is not None else context_length * 9 // 10
    return None


def _is_message(item: dict[str, Any], *roles: str) -> bool:
    return item["type"] == "message" and item["role"] in roles
