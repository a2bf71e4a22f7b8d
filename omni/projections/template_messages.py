"""Stored items → chat-template messages.

System and developer messages (and `instructions`) merge into one leading system message,
so templates that allow a single system message still work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_ROLES = ("system", "developer")


def _text(item: dict[str, Any]) -> str:
    parts = item.get("content", [])
    return "\n".join(p.get("text") or p.get("refusal") or "" for p in parts)


def _content(item: dict[str, Any], images: Mapping[str, bytes] | None) -> str | list[Any]:
    """A message's content for the template: its text, or, where it holds images and their
    bytes are given (a vision model), its parts in order, each image as its bytes."""
    parts = item.get("content", [])
    if images is None or not any(p.get("type") == "input_image" for p in parts):
        return _text(item)
    return [
        {"type": "image", "image": images[p["image_url"]]}
        if p.get("type") == "input_image"
        else {"type": "text", "text": p.get("text") or p.get("refusal") or ""}
        for p in parts
    ]


def chat_content(content: str | list[Any] | None, images: Mapping[str, bytes] | None) -> Any:
    """A chat message's content for the template: its text, or, as `_content`, its parts
    with each image_url part as the image's bytes."""
    if not isinstance(content, list):
        return content or ""
    if images is None or not any(p.get("type") == "image_url" for p in content):
        return "".join(p.get("text") or p.get("refusal") or "" for p in content)
    return [
        {"type": "image", "image": images[_url(p["image_url"])]}
        if p.get("type") == "image_url"
        else {"type": "text", "text": p.get("text") or ""}
        for p in content
    ]


def _url(ref: Any) -> str:
    return ref if isinstance(ref, str) else str(ref["url"])


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "\n".join(p.get("text", "") for p in output if isinstance(p, dict))


def item_text(item: dict[str, Any]) -> str:
    """Text of the item that every rendering of it contains (tool calls' JSON aside)."""
    if item["type"] == "message":
        return _text(item)
    if item["type"] == "function_call_output":
        return _output_text(item["output"])
    return ""


def to_chat_messages(
    instructions: str | None,
    items: Sequence[dict[str, Any]],
    structured_tools: bool,
    images: Mapping[str, bytes] | None = None,
) -> list[dict[str, Any]]:
    """Chat messages for the template; tool items as tool_calls/tool messages, or as text
    when the template knows no tools; `images`: the bytes of the items' images by URL, for a
    vision model (else images are left out)."""
    system = [instructions] if instructions else []
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for item in items:
        kind = item["type"]
        if kind == "message" and item["role"] in SYSTEM_ROLES:
            system.append(_text(item))
        elif kind == "message":
            messages.append({"role": item["role"], "content": _content(item, images)})
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            call = {"name": item["name"], "arguments": _arguments(item["arguments"])}
            if structured_tools:
                messages.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": item["call_id"], "type": "function", "function": call}
                        ],
                    }
                )
            else:
                messages.append({"role": "assistant", "content": json.dumps(call)})
        elif kind == "function_call_output":
            output = _output_text(item["output"])
            if structured_tools:
                messages.append(
                    {"role": "tool", "tool_call_id": item["call_id"], "content": output}
                )
            else:
                name = names.get(item["call_id"], item["call_id"])
                messages.append({"role": "user", "content": f"Result of {name}: {output}"})
        # reasoning items carry nothing a non-reasoning template can show
    if system:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return messages


def merge_system(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for the template: developer becomes system, and every system message
    merges into one leading system message (many templates allow only one)."""
    system = [m["content"] for m in messages if m["role"] in SYSTEM_ROLES]
    rest = [m for m in messages if m["role"] not in SYSTEM_ROLES]
    if system:
        rest.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return rest


def chat_for_template(
    messages: Sequence[dict[str, Any]], structured_tools: bool
) -> list[dict[str, Any]]:
    """Chat Completions messages for the template: system merged first; assistant tool calls
    with their arguments as objects (what templates iterate), or, for a template that knows
    no tools, calls and results as text."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in merge_system(messages):
        calls = message.get("tool_calls") or []
        if message["role"] == "assistant" and calls:
            parsed = [
                {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
                for c in calls
            ]
            names.update({c.get("id", ""): c["function"]["name"] for c in calls})
            if structured_tools:
                tool_calls = [
                    {"id": c.get("id"), "type": "function", "function": f}
                    for c, f in zip(calls, parsed, strict=True)
                ]
                out.append(
                    {**message, "content": message.get("content") or "", "tool_calls": tool_calls}
                )
            else:
                text = json.dumps(parsed[0] if len(parsed) == 1 else parsed)
                said = message.get("content") or ""
                out.append({"role": "assistant", "content": f"{said}\n{text}" if said else text})
        elif message["role"] == "tool" and not structured_tools:
            name = names.get(message.get("tool_call_id") or "", message.get("tool_call_id"))
            out.append({"role": "user", "content": f"Result of {name}: {message['content']}"})
        else:
            out.append(message)
    return out
