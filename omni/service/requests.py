"""From a validated request to what generation needs: the prompt and the initial Response."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from omni.errors import InvalidRequest
from omni.ports.chat import Engine
from omni.ports.jobs import Sampling
from omni.projections.template_messages import to_chat_messages
from omni.schemas.responses import ResponseCreate
from omni.service.models import LOAD_MS
from omni.service.plan import RunPlan
from omni.tools.calls import plain_tools_prompt
from omni.vocabulary import RESPONSE

log = logging.getLogger(__name__)


def function_tools(body: ResponseCreate) -> list[dict[str, Any]]:
    """The tools this server can honour; hosted tools (web search, …) are ignored."""
    for tool in body.tools:
        if tool.get("type") != "function":
            log.warning("ignoring tool of type %r: it cannot run here", tool.get("type"))
    return [t for t in body.tools if t.get("type") == "function"]


def render_prompt(
    engine: Engine,
    instructions: str | None,
    items: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    mode: str = "auto",
    thinking: bool | None = None,
    images: Mapping[str, bytes] | None = None,
) -> list[int]:
    """`tools` in the chat shape. A template that renders tools gets them; for one that does
    not, they (and the JSON answer format) go into the system message, unless no call may be
    made. `images`: the items' images by URL, for a vision model."""
    structured = engine.capabilities.template_tools
    messages = to_chat_messages(instructions, items, structured, images)
    return rendered(engine, messages, tools, mode, structured, thinking=thinking)


def rendered(
    engine: Engine,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    mode: str,
    structured: bool,
    param: str = "input",
    thinking: bool | None = None,
) -> list[int]:
    """The prompt of chat `messages` (system merged first) with `tools` (chat shape)."""
    if tools and not structured and mode != "none":
        messages = _with_system(messages, plain_tools_prompt(tools))
    switch = {} if thinking is None else {"thinking": thinking}
    prompt = engine.render(messages, tools if structured else [], **switch)
    if len(prompt) >= engine.capabilities.context_length:
        raise InvalidRequest(
            f"The input is {len(prompt)} tokens; this model's context is "
            f"{engine.capabilities.context_length} tokens.",
            param=param,
            code="context_length_exceeded",
        )
    return prompt


def _with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def initial_response(
    response_id: str,
    body: ResponseCreate,
    tools: list[dict[str, Any]],
    model_id: str,
    sampling: Sampling,
) -> dict[str, Any]:
    """The Response as `response.created` carries it: every request field echoed (sampling
    settings left out: the server's defaults)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "queued" if body.background else "in_progress",
        "background": body.background,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "metadata": body.metadata or {},
        "model": model_id,  # the model that answers (a request may name it by an alias)
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "prompt_cache_key": body.prompt_cache_key,
        "reasoning": body.reasoning or {"effort": None, "summary": None},
        "safety_identifier": body.safety_identifier,
        "service_tier": "default",
        "store": body.store,
        "temperature": sampling.temperature,
        "text": body.text or {"format": {"type": "text"}},
        "tool_choice": body.tool_choice,
        "tools": tools,
        "top_logprobs": body.top_logprobs or 0,
        "top_p": sampling.top_p,
        "truncation": body.truncation or "disabled",
        "usage": None,
        "user": body.user,
    }


def accepted_request(
    body: ResponseCreate,
    items: list[dict[str, Any]],
    response: dict[str, Any],
    engine: Engine,
    prompt_tokens: int,
    plan: RunPlan,
    owner: str | None,
) -> dict[str, Any]:
    """The accepted-request event's data: what a restart or a read needs of the request."""
    return {
        "kind": RESPONSE,
        "body": body.model_dump(mode="json", exclude={"input"}),
        "input": items,
        "response": response,
        "model_id": engine.model_id,
        "prompt_tokens": prompt_tokens,
        "plan": plan.to_json(),
        "owner": owner,
        "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
    }
