"""A Messages request (Anthropic's) as the chat completion it runs as. Pure.

Both APIs ask one thing of a model (a conversation, tools, a format, sampling, thinking), so a
message is planned and generated as its chat completion is: the same template, grammar,
thinking and tool calls. Only the recorder differs (omni.protocol.message_recorder).
"""

from __future__ import annotations

import json
from typing import Any

from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.messages import MessageCreate, MessageParam, MessagesRequest

# Omni's sampling extras a Messages request may carry (as `extra_body`), passed on as they are.
EXTRAS = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "seed",
    "adapter_path",
    "draft_model",
)
# Anthropic's effort → the chat completion's reasoning effort (its thinking budget).
EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def as_chat(body: MessagesRequest) -> ChatCompletionCreate:
    """The chat completion `body` runs as (a token count's has no output limit)."""
    messages: list[dict[str, Any]] = []
    if body.system:
        messages.append({"role": "system", "content": body.system_text})
    for i, message in enumerate(body.messages):
        if not _cleared(message, body.messages[i + 1 :]):
            messages += _chat_messages(message)
    effort, budget = _thinking(body)
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "tools": [tool.function() for tool in body.tools] if body.tools else None,
        "tool_choice": _tool_choice(body.tool_choice) if body.tools else None,
        "response_format": _format(body.output_config),
        "reasoning_effort": effort,
        "thinking_budget": budget,
        **{name: getattr(body, name) for name in EXTRAS},
    }
    if (body.tool_choice or {}).get("disable_parallel_tool_use"):
        fields["parallel_tool_calls"] = False
    if isinstance(body, MessageCreate):
        fields |= {
            "max_tokens": body.max_tokens,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "user": body.user,
            "store": body.store,
        }
    chat = ChatCompletionCreate.model_validate(fields)
    if isinstance(body, MessageCreate) and body.stop_sequences:
        # Anthropic takes more stop sequences than Chat Completions' four.
        chat = chat.model_copy(update={"stop": list(body.stop_sequences)})
    return chat


def _cleared(message: MessageParam, later: list[MessageParam]) -> bool:
    """A system message shown only until the next user message, which has come."""
    return message.clear_at == "next_user_message" and any(m.role == "user" for m in later)


def _chat_messages(message: MessageParam) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "system":  # merged into the leading system message, as chat's are
        return [{"role": "system", "content": "\n".join(b["text"] for b in message.content)}]
    if message.role == "assistant":
        return [_assistant(message.content)]
    results = [b for b in message.content if b["type"] == "tool_result"]
    said = [_part(b) for b in message.content if b["type"] != "tool_result"]
    out = [m for result in results for m in _tool_result(result)]
    if said or not out:
        out.append({"role": "user", "content": said})
    return out


def _part(block: dict[str, Any]) -> dict[str, Any]:
    """A user's text or image block as a chat content part."""
    if block["type"] == "text":
        return {"type": "text", "text": block["text"]}
    source = block["source"]
    if source["type"] == "url":
        url = source["url"]
    else:
        url = f"data:{source['media_type']};base64,{source['data']}"
    return {"type": "image_url", "image_url": {"url": url}}


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
        }
        for b in blocks
        if b["type"] == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message |= {"content": text or None, "tool_calls": calls}
    thinking = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    if thinking:
        message["reasoning_content"] = thinking
    return message


def _tool_result(block: dict[str, Any]) -> list[dict[str, Any]]:
    """A tool's result: a tool message with its text; its images, if any, in a user
    message after it (a chat tool message holds text only)."""
    content = block.get("content", "")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
    text = "\n".join(p["text"] for p in parts if p["type"] == "text")
    if block.get("is_error"):
        text = f"Error: {text}"
    out = [{"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}]
    images = [_part(p) for p in parts if p["type"] == "image"]
    if images:
        out.append({"role": "user", "content": images})
    return out


def _tool_choice(choice: dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice["type"] == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice["type"]]


def _format(config: dict[str, Any] | None) -> dict[str, Any] | None:
    form = (config or {}).get("format")
    if form is None:
        return None
    schema = {"name": "output", "schema": form["schema"], "strict": True}
    return {"type": "json_schema", "json_schema": schema}


def _thinking(body: MessagesRequest) -> tuple[str, int | None]:
    """(the reasoning effort, the thinking budget): thinking only where the request turns it
    on (`thinking`, or an `effort`), as Anthropic's models think; its budget from
    `budget_tokens`, else from the effort."""
    thinking = body.thinking or {}
    effort = (body.output_config or {}).get("effort")
    if thinking.get("type") == "disabled" or (not thinking and effort is None):
        return "none", None
    return EFFORT.get(effort or "high", "high"), thinking.get("budget_tokens")
