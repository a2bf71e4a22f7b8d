"""What a request asked, for people: its model, sampling, instructions and input, one line
an input, summarized by the kind of object it made."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

_TEXT = 80  # characters of an input item's text kept in a request summary
# The sampling settings a completion's body may carry (a response's request stores its own).
_COMPLETION_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "top_logprobs",
)


class InputLine(TypedDict):
    """One input of a request, as a summary lists it."""

    type: str
    role: Any  # as the request wrote it: "user", ...; None where the input has no role
    text: str


class RequestSummary(TypedDict):
    model: Any  # as the request named it
    sampling: dict[str, Any]
    instructions: Any
    input: list[InputLine]
    stream: bool


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (_part_text(p) for p in content if isinstance(p, dict))
        return " ".join(t for t in texts if t)
    return ""


def _part_text(part: dict[str, Any]) -> str:
    """A part's text; an image (input_image, image_url) as [image], with its URL unless it
    is a data: URL (the image itself)."""
    if part.get("type") not in ("input_image", "image_url"):
        return str(part.get("text") or "")
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    return "[image]" if not isinstance(url, str) or url.startswith("data:") else f"[image {url}]"


def _line(text: str) -> str:
    """A text on one line, cut to a preview."""
    text = " ".join(text.split())
    return text[:_TEXT] + ("…" if len(text) > _TEXT else "")


# Items with no text of their own (omni.service.compaction): what they are.
_SEALED = {"compaction": "[a compacted window, sealed]", "compaction_trigger": "[compact]"}


def _item(item: dict[str, Any]) -> InputLine:
    """An input item as {type, role, text}: the text cut to a preview."""
    type_ = str(item.get("type") or "message")
    if type_ == "function_call":
        text = f"{item.get('name')}({item.get('arguments') or ''})"
    elif type_ == "function_call_output":
        text = str(item.get("output") or "")
    elif type_ in _SEALED:
        text = _SEALED[type_]
    else:
        text = _content_text(item.get("content"))
    return {"type": type_, "role": item.get("role"), "text": _line(text)}


def _told(type_: str, text: str) -> list[InputLine]:
    """An input that is not kept as items: what it was, in one line."""
    return [{"type": type_, "role": None, "text": text}]


def _embedding(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """Its inputs' text is not kept: how many, and their tokens."""
    n, tokens = doc.get("inputs"), doc.get("prompt_tokens")
    told = f"{n} input{'' if n == 1 else 's'}, {tokens} token{'' if tokens == 1 else 's'}"
    return {
        "model": body.get("model"),
        "sampling": {},
        "instructions": None,
        "input": _told("embedding_input", told),
        "stream": False,
    }


def _speech(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The text spoken, as a response's input is kept."""
    return {
        "model": body.get("model"),
        "sampling": {k: body[k] for k in ("voice", "speed", "response_format") if k in body},
        "instructions": body.get("instructions"),
        "input": _told("speech_input", _line(str(body.get("input") or ""))),
        "stream": body.get("stream_format") == "sse",
    }


def _image(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The prompt drawn, as a response's input is kept."""
    drawn: dict[str, Any] = {k: doc[k] for k in ("size", "quality", "steps", "seed") if k in doc}
    drawn.update({k: body[k] for k in ("n", "output_format") if k in body})
    return {
        "model": body.get("model"),
        "sampling": drawn,
        "instructions": None,
        "input": _told("image_prompt", _line(str(body.get("prompt") or ""))),
        "stream": bool(body.get("stream")),
    }


def _transcription(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The audio is not kept: what it was."""
    audio = doc.get("audio") or {}
    told = f"{audio.get('filename')}: {audio.get('seconds')} s of audio ({doc.get('task')})"
    return {
        "model": body.get("model"),
        "sampling": {k: body[k] for k in ("language", "temperature") if body.get(k)},
        "instructions": body.get("prompt"),
        "input": _told("audio", told),
        "stream": bool(body.get("stream")),
    }


def _conversation(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """A conversation asks nothing of a model: its metadata (its items are its output)."""
    metadata = body.get("metadata") or {}
    told = ", ".join(f"{k}={v}" for k, v in metadata.items())
    return {
        "model": None,
        "sampling": {},
        "instructions": None,
        "input": _told("metadata", _line(told)) if told else [],
        "stream": False,
    }


def _response(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    sampling = dict((doc.get("plan") or doc).get("sampling") or {})  # older: beside
    items = [_item(i) for i in doc.get("input") or [] if isinstance(i, dict)]
    return _kept(body, sampling, items)


def _chat(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    items = [_item({"type": "message", **m}) for m in body.get("messages") or []]
    return _kept(body, _completion_sampling(body), items)


def _text_completion(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    prompt = body.get("prompt")
    prompts = prompt if isinstance(prompt, list) else [prompt]
    items = [_item({"type": "prompt", "content": str(p)}) for p in prompts]
    return _kept(body, _completion_sampling(body), items)


# A message's settings (Anthropic's names; temperature 0 makes it replayable).
_MESSAGE_SAMPLING = (
    "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "thinking", "tool_choice",
    "output_config", "seed",
)  # fmt: skip


def _message(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """Anthropic's Messages: its system as instructions, each message's blocks a line each
    (text, image, tool_use as name(input), tool_result as its text), and its tools' names."""
    lines = [
        line
        for m in body.get("messages") or []
        if isinstance(m, dict)
        for line in _message_lines(m.get("role"), m.get("content"))
    ]
    sampling = {k: body[k] for k in _MESSAGE_SAMPLING if body.get(k) is not None}
    tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    if tools:
        sampling["tools"] = ", ".join(str(t) for t in tools)
    return {
        "model": body.get("model"),
        "sampling": sampling,
        "instructions": _block_text(body.get("system")) or None,
        "input": lines,
        "stream": bool(body.get("stream")),
    }


def _message_lines(role: Any, content: Any) -> list[InputLine]:
    if isinstance(content, str):
        return [{"type": "text", "role": role, "text": _line(content)}]
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    return [{"type": str(b.get("type")), "role": role, "text": _line(_block(b))} for b in blocks]


def _block(block: dict[str, Any]) -> str:
    """One content block's text: a tool call as `name({input})`, a tool's result as its text
    (`error: ` first where it failed), an image as [image] (or its URL)."""
    type_ = block.get("type")
    if type_ == "tool_use":
        return f"{block.get('name')}({json.dumps(block.get('input'), ensure_ascii=False)})"
    if type_ == "tool_result":
        told = _block_text(block.get("content"))
        return f"error: {told}" if block.get("is_error") else told
    if type_ == "image":
        source = block.get("source") or {}
        url = source.get("url") if isinstance(source, dict) else None
        return f"[image {url}]" if isinstance(url, str) else "[image]"
    if type_ == "thinking":
        return str(block.get("thinking") or "")
    return str(block.get("text") or "")


def _block_text(content: Any) -> str:
    """A system prompt's or a tool result's text: a string, or its blocks' joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_block(b) for b in content if isinstance(b, dict))
    return ""


def _completion_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in _COMPLETION_SAMPLING if body.get(k) is not None}


def _kept(body: dict[str, Any], sampling: dict[str, Any], items: list[InputLine]) -> RequestSummary:
    """A request whose input is kept as items (a response's, a completion's)."""
    return {
        "model": body.get("model"),
        "sampling": sampling,
        "instructions": body.get("instructions"),
        "input": items,
        "stream": bool(body.get("stream")),
    }


# A request's summary, by the kind of object it made (tests/test_modalities.py: every kind has
# one; another kind: a text completion's).
SUMMARIES: dict[str, Callable[[dict[str, Any], dict[str, Any]], RequestSummary]] = {
    "response": _response,
    "chat.completion": _chat,
    "text_completion": _text_completion,
    "embedding": _embedding,
    "speech": _speech,
    "transcription": _transcription,
    "image": _image,
    "message": _message,
    "conversation": _conversation,
}


def request_summary(kind: str, doc: dict[str, Any]) -> RequestSummary:
    """An accepted request ({kind, body, ...}) as {model, sampling, instructions, input}."""
    return SUMMARIES.get(kind, _text_completion)(doc.get("body") or {}, doc)
