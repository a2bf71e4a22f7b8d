"""Reasoning models: the effort a request asks for → the template's thinking switch and a
thinking budget; and the splitter that reads the think block out of the output."""

from __future__ import annotations

from omni.ports.chat import Engine
from omni.protocol.thinking import ThinkSplitter

# Effort → most tokens of thinking before the block is closed for the model (None: no limit).
EFFORT_BUDGET = {"low": 1024, "medium": 4096}


def thinking_plan(
    engine: Engine, effort: str | None, budget: int | None
) -> tuple[bool | None, int | None]:
    """(thinking on/off for the template, or None for its default; the token budget)."""
    if engine.capabilities.thinking is None:
        return None, None  # not a reasoning model: effort is echoed and ignored
    if effort in ("none", "minimal"):
        return False, None
    return (None if effort is None else True), (
        budget if budget is not None else EFFORT_BUDGET.get(effort or "")
    )


def thinker(engine: Engine, prompt: list[int], enabled: bool | None) -> ThinkSplitter | None:
    marks = engine.capabilities.thinking
    if marks is None or enabled is False:
        return None
    return ThinkSplitter(*marks, inside=engine.opens_thinking(prompt))


def reasoning_tokens(engine: Engine, think: ThinkSplitter, tokens: list[int]) -> int:
    """How many of a generation's `tokens` fell inside its think block, counted as a recorder
    counts them live; `think` is a splitter as it stood before the first of them (consumed).
    For a generation continued after a restart, whose recorder starts over."""
    if engine.capabilities.thinking is None:
        return 0
    inside = 0
    for text in engine.segments(tokens):
        inside += think.inside
        think.feed(text)
    return inside
