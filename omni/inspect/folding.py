"""Pure reads of stored documents: a request summarized, an object's output, its rates."""

from __future__ import annotations

import json
from typing import Any

PREVIEW_WORDS = 12
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


def preview(text: str, words: int = PREVIEW_WORDS) -> str:
    """The first words of a text, on one line."""
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def decode_rate(
    output_tokens: int | None, first_ms: int | None, end_ms: int | None
) -> float | None:
    """Tokens/s after the first token (the views' `tokens_per_s`): None until it can be told."""
    if output_tokens is None or first_ms is None or end_ms is None:
        return None
    if output_tokens < 2 or end_ms <= first_ms:
        return None
    return round((output_tokens - 1) * 1000.0 / (end_ms - first_ms), 1)


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


def _item(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as {type, role, text}: the text cut to a preview."""
    type_ = str(item.get("type") or "message")
    if type_ == "function_call":
        text = f"{item.get('name')}({item.get('arguments') or ''})"
    elif type_ == "function_call_output":
        text = str(item.get("output") or "")
    else:
        text = _content_text(item.get("content"))
    text = " ".join(text.split())
    return {
        "type": type_,
        "role": item.get("role"),
        "text": text[:_TEXT] + ("…" if len(text) > _TEXT else ""),
    }


def request_summary(kind: str, doc: dict[str, Any]) -> dict[str, Any]:
    """An accepted request ({kind, body, ...}) as {model, sampling, instructions, input}."""
    body = doc.get("body") or {}
    if kind == "embedding":  # its inputs' text is not kept: how many, and their tokens
        n, tokens = doc.get("inputs"), doc.get("prompt_tokens")
        told = f"{n} input{'' if n == 1 else 's'}, {tokens} token{'' if tokens == 1 else 's'}"
        return {
            "model": body.get("model"),
            "sampling": {},
            "instructions": None,
            "input": [{"type": "embedding_input", "role": None, "text": told}],
            "stream": False,
        }
    if kind == "speech":  # the text spoken, as a response's input is kept
        told = " ".join(str(body.get("input") or "").split())
        return {
            "model": body.get("model"),
            "sampling": {k: body[k] for k in ("voice", "speed", "response_format") if k in body},
            "instructions": body.get("instructions"),
            "input": [{"type": "speech_input", "role": None,
                       "text": told[:_TEXT] + ("…" if len(told) > _TEXT else "")}],
            "stream": body.get("stream_format") == "sse",
        }  # fmt: skip
    if kind == "image":  # the prompt drawn, as a response's input is kept
        told = " ".join(str(body.get("prompt") or "").split())
        drawn: dict[str, Any] = {
            k: doc[k] for k in ("size", "quality", "steps", "seed") if k in doc
        }
        drawn.update({k: body[k] for k in ("n", "output_format") if k in body})
        return {
            "model": body.get("model"),
            "sampling": drawn,
            "instructions": None,
            "input": [{"type": "image_prompt", "role": None,
                       "text": told[:_TEXT] + ("…" if len(told) > _TEXT else "")}],
            "stream": bool(body.get("stream")),
        }  # fmt: skip
    if kind == "transcription":  # the audio is not kept: what it was
        audio = doc.get("audio") or {}
        told = f"{audio.get('filename')}: {audio.get('seconds')} s of audio ({doc.get('task')})"
        return {
            "model": body.get("model"),
            "sampling": {k: body[k] for k in ("language", "temperature") if body.get(k)},
            "instructions": body.get("prompt"),
            "input": [{"type": "audio", "role": None, "text": told}],
            "stream": bool(body.get("stream")),
        }
    if kind == "response":
        sampling = dict((doc.get("plan") or doc).get("sampling") or {})  # older: beside
        items = [_item(i) for i in doc.get("input") or [] if isinstance(i, dict)]
    else:
        sampling = {k: body[k] for k in _COMPLETION_SAMPLING if body.get(k) is not None}
        if kind == "chat.completion":
            items = [_item({"type": "message", **m}) for m in body.get("messages") or []]
        else:
            prompt = body.get("prompt")
            prompts = prompt if isinstance(prompt, list) else [prompt]
            items = [_item({"type": "prompt", "content": str(p)}) for p in prompts]
    return {
        "model": body.get("model"),
        "sampling": sampling,
        "instructions": body.get("instructions"),
        "input": items,
        "stream": bool(body.get("stream")),
    }


def speech_output(ending: dict[str, Any]) -> str:
    """What a finished speech made (its audio is never kept): '1.25 s of audio, 20110 bytes'."""
    if "duration_s" not in ending:
        return ""
    return f"{ending['duration_s']} s of audio, {ending.get('bytes')} bytes"


def images_output(request: dict[str, Any], ending: dict[str, Any]) -> str:
    """What a finished image generation made (its pictures are never kept):
    '2 images 64x48 png, 20110 bytes'."""
    if "images" not in ending:
        return ""
    n, body = ending["images"], request.get("body") or {}
    made = f"{n} image{'' if n == 1 else 's'} {request.get('size')}"
    return f"{made} {body.get('output_format', 'png')}, {ending.get('bytes')} bytes"


def response_output(response: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
    """A response's (output text, tool calls, reasoning text)."""
    text, calls, reasoning = [], [], []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            text += [p.get("text") or "" for p in item.get("content") or []]
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "name": item.get("name"),
                    "arguments": item.get("arguments") or "",
                    "call_id": item.get("call_id"),
                }
            )
        elif item.get("type") == "reasoning":
            reasoning += [p.get("text") or "" for p in item.get("content") or []]
    return "".join(text), calls, "".join(reasoning)


def completion_output(kind: str, folded: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
    """A folded chat or text completion's (output text, tool calls, reasoning text)."""
    choice = (folded.get("choices") or [{}])[0]
    if kind != "chat.completion":
        return str(choice.get("text") or ""), [], ""
    message = choice.get("message") or {}
    calls = [
        {
            "name": (c.get("function") or {}).get("name"),
            "arguments": (c.get("function") or {}).get("arguments") or "",
            "call_id": c.get("id"),
        }
        for c in message.get("tool_calls") or []
    ]
    return str(message.get("content") or ""), calls, str(message.get("reasoning_content") or "")


def transcript_text(events: list[tuple[str, str]]) -> str:
    """A transcription's text: its done event's, else its deltas so far."""
    deltas = []
    for type_, data in events:
        if type_ == "transcript.text.done":
            return str(json.loads(data).get("text") or "")
        if type_ == "transcript.text.delta":
            deltas.append(str(json.loads(data).get("delta") or ""))
    return "".join(deltas)
