"""A request's input items whole, for people: each item's role, its whole text, and its parts
in order (text, images, tool calls and their results, what a sealed item is), read from each
API's shapes: Responses' items, Chat's messages, Anthropic's content blocks."""

from __future__ import annotations

import json
from typing import Any, TypedDict

# One piece of an item, by its `type`: text {text}; reasoning {text}; image {url} (a data: URL
# is the picture itself; None where it is a file_id); file {text}; tool_call {name, arguments,
# call_id}; tool_result {text, call_id, is_error}; note {text}: what an item with no text is.
Part = dict[str, Any]


class InputItem(TypedDict):
    """One input of a request, whole."""

    type: str  # the item's type as the API names it: "message", "function_call", ...
    role: Any  # as the request wrote it: "user", ...; None where the input has no role
    text: str  # its parts' text joined: an image as [image], a call as name(arguments)
    parts: list[Part]


# Items with no text of their own (omni.service.compaction): what they are.
SEALED = {
    "compaction": "[a compacted window, sealed: the turns before it, summarized and encrypted;"
    " the model reads it in their place]",
    "compaction_trigger": "[compact: the conversation so far is to be summarized into one"
    " sealed window]",
}


def text(value: Any) -> Part:
    return {"type": "text", "text": str(value)}


def note(value: str) -> Part:
    return {"type": "note", "text": value}


def image(url: Any, **more: Any) -> Part:
    return {"type": "image", "url": url if isinstance(url, str) else None, **more}


def call(name: Any, arguments: Any, call_id: Any) -> Part:
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"type": "tool_call", "name": name, "arguments": shown, "call_id": call_id}


def result(value: Any, call_id: Any, is_error: bool = False) -> Part:
    return {"type": "tool_result", "text": value, "call_id": call_id, "is_error": is_error}


def part_text(part: Part) -> str:
    """A part on one line of a summary: an image as [image] (with its URL unless it is a
    data: URL, the image itself), a call as name(arguments), a failed result after `error: `."""
    kind = part["type"]
    if kind == "image":
        url = part.get("url")
        return "[image]" if not url or url.startswith("data:") else f"[image {url}]"
    if kind == "tool_call":
        return f"{part['name']}({part['arguments']})"
    if kind == "tool_result":
        return f"error: {part['text']}" if part.get("is_error") else str(part["text"])
    return str(part.get("text") or "")


def item(type_: str, role: Any, parts: list[Part]) -> InputItem:
    return {
        "type": type_,
        "role": role,
        "text": " ".join(t for t in map(part_text, parts) if t),
        "parts": parts,
    }


def told(type_: str, what: str) -> list[InputItem]:
    """An input that is not kept as items (audio, an embedding's text): what it was."""
    return [item(type_, None, [note(what)])]


def response_item(given: dict[str, Any]) -> InputItem:
    """A Responses input item (a message, a call, its output, a sealed window, reasoning)."""
    type_ = str(given.get("type") or "message")
    if type_ == "function_call":
        parts = [call(given.get("name"), given.get("arguments") or "", given.get("call_id"))]
    elif type_ == "function_call_output":
        parts = [result(_joined(given.get("output")), given.get("call_id"))]
    elif type_ in SEALED:
        parts = [note(SEALED[type_])]
    elif type_ == "reasoning":
        said = [p.get("text") or "" for p in given.get("content") or given.get("summary") or []]
        parts = [{"type": "reasoning", "text": "".join(said)}] if any(said) else []
        if given.get("encrypted_content"):
            parts.append(note("[reasoning, sealed]"))
    elif type_ == "message":
        parts = content_parts(given.get("content"))
    else:  # a type this page does not know: the item as the request gave it
        parts = [text(json.dumps(given, ensure_ascii=False))]
    return item(type_, given.get("role"), parts)


def content_parts(content: Any) -> list[Part]:
    """A Responses or Chat message's content: a string, or its parts of each type."""
    if isinstance(content, str):
        return [text(content)] if content else []
    given = content if isinstance(content, list) else []
    return [_part(p) for p in given if isinstance(p, dict)]


def _part(part: dict[str, Any]) -> Part:
    kind = part.get("type")
    if kind in ("input_image", "image_url"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return image(url, **{k: part[k] for k in ("file_id", "detail") if part.get(k)})
    if kind in ("input_file", "file"):
        nested = part.get("file")  # Chat's {file: {...}}; Responses' fields on the part
        file: dict[str, Any] = nested if isinstance(nested, dict) else part
        named = file.get("filename") or file.get("file_id") or file.get("file_url")
        return {"type": "file", "text": f"[file {named}]" if named else "[file]"}
    if kind == "input_audio":
        return {"type": "file", "text": "[audio]"}
    if kind == "refusal":
        return {"type": "refusal", "text": str(part.get("refusal") or "")}
    return text(part.get("text") or "")


def chat_message(message: dict[str, Any]) -> InputItem:
    """A Chat message: its content, the tools it called, or the result it carries."""
    role = message.get("role")
    parts = content_parts(message.get("content"))
    if role == "tool":
        parts = [result(_joined(message.get("content")), message.get("tool_call_id"))]
    for made in message.get("tool_calls") or []:
        function = made.get("function") or {}
        parts.append(call(function.get("name"), function.get("arguments") or "", made.get("id")))
    if message.get("refusal"):
        parts.append({"type": "refusal", "text": str(message["refusal"])})
    return item("message", role, parts)


def anthropic_message(message: dict[str, Any]) -> InputItem:
    """An Anthropic message: its content blocks, in order."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    parts = [block(b) for b in blocks or [] if isinstance(b, dict)]
    return item("message", message.get("role"), parts)


def block(given: dict[str, Any]) -> Part:
    """One Anthropic content block; an inline image as a data: URL."""
    kind = given.get("type")
    if kind == "tool_use":
        return call(given.get("name"), given.get("input"), given.get("id"))
    if kind == "tool_result":
        return result(
            blocks_text(given.get("content")), given.get("tool_use_id"), bool(given.get("is_error"))
        )
    if kind == "image":
        source = given.get("source") or {}
        if source.get("type") == "base64":
            return image(f"data:{source.get('media_type')};base64,{source.get('data')}")
        return image(source.get("url"))
    if kind == "thinking":
        return {"type": "reasoning", "text": str(given.get("thinking") or "")}
    if kind == "redacted_thinking":
        return note("[thinking, redacted]")
    if kind == "document":
        return {"type": "file", "text": f"[document {given.get('title') or ''}]".strip()}
    return text(given.get("text") or "")


def blocks_text(content: Any) -> str:
    """A system prompt's text: a string, or its blocks' joined."""
    return " ".join(part_text(block(b)) for b in _blocks(content))


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _joined(value: Any) -> str:
    """A tool's output: a string, or the text of its parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(t for t in map(part_text, content_parts(value)) if t)
    return "" if value is None else json.dumps(value, ensure_ascii=False)
