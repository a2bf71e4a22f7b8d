"""A response's prompt: from a validated request and its whole conversation (earlier items,
then the request's own) to the tokens the model reads, its tools and its images.
`responses.create`, `responses.input_tokens.count` and the check of `context_management` all
build it here, so a count is exactly the prompt a create with the same body would prefill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni.ports.chat import Engine
from omni.projections.template_messages import item_text
from omni.schemas.responses import ResponseCreate
from omni.service.compaction import Opener, window
from omni.service.image_urls import Fetcher
from omni.service.prompting import Prompter, fit_suffix, refuse_unfittable
from omni.service.reasoning import thinking_plan
from omni.service.requests import function_tools, render_prompt
from omni.service.vision_inputs import ImageRef, item_images, load_images, refuse_images
from omni.tools.policy import Mode, tool_policy
from omni.tools.schema import decoding_constraint


@dataclass(frozen=True)
class Prompted:
    """What a request's prompt is made of, and what generation needs of it."""

    tools: list[dict[str, Any]]  # the function tools, as the response echoes them
    callable_tools: list[dict[str, Any]]  # those the model may call now (tool_choice)
    mode: Mode
    constraint: Any  # the decoding constraint (tool calls, text.format), or None
    thinking: bool | None
    budget: int | None  # the thinking budget in tokens
    prompt: list[int]
    shown: list[ImageRef]  # the images the prompt's image tokens stand for
    loaded: dict[str, bytes]  # every image's bytes, by URL


async def build_prompt(
    prompter: Prompter,
    fetcher: Fetcher | None,
    engine: Engine,
    body: ResponseCreate,
    conversation: list[dict[str, Any]],
    items: list[dict[str, Any]],
    open_: Opener,
) -> Prompted:
    """The prompt of `conversation` (earlier items, then the request's `items`, its tail),
    from its latest compaction item on (`open_` opens one)."""
    tools = function_tools(body)
    callable_tools, mode = tool_policy(tools, body.tool_choice)
    fmt = (body.text or {}).get("format")
    constraint = decoding_constraint(
        engine.capabilities.tool_format,
        callable_tools,
        mode,
        fmt,
        "text.format",
        body.parallel_tool_calls,
    )
    effort = (body.reasoning or {}).get("effort")
    thinking, budget = thinking_plan(engine, effort, body.thinking_budget)
    history, items = window(conversation[: len(conversation) - len(items)], items, open_)
    conversation = [*history, *items]
    earlier = "conversation" if body.conversation is not None else "previous_response_id"
    refs = [*item_images(history, earlier), *item_images(items)]
    refuse_images(engine, refs)
    loaded = await load_images(refs, fetcher)
    prompt, shown = await prompter.run(
        fit, engine, body, conversation, callable_tools, mode, thinking, loaded
    )
    return Prompted(
        tools, callable_tools, mode, constraint, thinking, budget, prompt, shown, loaded
    )


def fit(
    engine: Engine,
    body: ResponseCreate,
    items: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    mode: Mode,
    thinking: bool | None = None,
    images: dict[str, bytes] | None = None,
) -> tuple[list[int], list[ImageRef]]:
    """The prompt (on the prompter's thread), and the images it shows; with truncation
    "auto", the oldest items go until it fits the context."""
    shown: list[list[ImageRef]] = [[]]

    def render(start: int) -> list[int]:
        prompt = render_prompt(
            engine, body.instructions, items[start:], tools, mode, thinking, images or None
        )
        shown[0] = item_images(items[start:])  # the last render that fits is the prompt
        return prompt

    sizes = [len(item_text(item).encode()) for item in items]
    fixed = len((body.instructions or "").encode())
    if body.truncation != "auto" or not items:
        refuse_unfittable(engine, fixed + sum(sizes), "input")
        return render(0), shown[0]
    return fit_suffix(engine, sizes, render, fixed), shown[0]
