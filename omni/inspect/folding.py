"""Pure reads of stored documents: an object's output, folded by its kind, and its rates."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple, TypedDict

from omni.projections.completions import fold_chat, fold_text
from omni.projections.conversation import fold_items
from omni.projections.messages import fold_message
from omni.projections.response import fold_response
from omni.vocabulary import IMAGES_COMPLETED, SPEECH_COMPLETED

PREVIEW_WORDS = 12


class ShownCall(TypedDict):
    """A tool call the model made, as the inspector shows it."""

    name: Any  # as the stored item names it
    arguments: str
    call_id: Any


class Output(NamedTuple):
    """An object's output: its text, its tool calls, its reasoning, what it refused."""

    text: str
    tool_calls: list[ShownCall]
    reasoning: str
    refusal: str = ""


Events = list[tuple[str, str]]  # a public stream's (type, data), in order


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


def response_output(response: dict[str, Any]) -> Output:
    """A response's output text, tool calls, reasoning text and refusal."""
    text: list[str] = []
    calls: list[ShownCall] = []
    reasoning: list[str] = []
    refused: list[str] = []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            parts = item.get("content") or []
            text += [p.get("text") or "" for p in parts if p.get("type") != "refusal"]
            refused += [p.get("refusal") or "" for p in parts if p.get("type") == "refusal"]
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
    return Output("".join(text), calls, "".join(reasoning), "".join(refused))


def completion_output(kind: str, folded: dict[str, Any]) -> Output:
    """A folded chat or text completion's output text, tool calls, reasoning and refusal."""
    choice = (folded.get("choices") or [{}])[0]
    if kind != "chat.completion":
        return Output(str(choice.get("text") or ""), [], "")
    message = choice.get("message") or {}
    calls: list[ShownCall] = [
        {
            "name": (c.get("function") or {}).get("name"),
            "arguments": (c.get("function") or {}).get("arguments") or "",
            "call_id": c.get("id"),
        }
        for c in message.get("tool_calls") or []
    ]
    return Output(
        str(message.get("content") or ""),
        calls,
        str(message.get("reasoning_content") or ""),
        str(message.get("refusal") or ""),
    )


def message_output(message: dict[str, Any]) -> Output:
    """A folded message's text, tool calls and thinking: its blocks of each type, in order."""
    text: list[str] = []
    calls: list[ShownCall] = []
    thinking: list[str] = []
    for block in message.get("content") or []:
        if block.get("type") == "text":
            text.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            calls.append(
                {"name": block.get("name"), "arguments": arguments, "call_id": block.get("id")}
            )
        elif block.get("type") == "thinking":
            thinking.append(str(block.get("thinking") or ""))
    return Output("".join(text), calls, "".join(thinking))


def transcript_text(events: Events) -> str:
    """A transcription's text: its done event's, else its deltas so far."""
    deltas = []
    for type_, data in events:
        if type_ == "transcript.text.done":
            return str(json.loads(data).get("text") or "")
        if type_ == "transcript.text.delta":
            deltas.append(str(json.loads(data).get("delta") or ""))
    return "".join(deltas)


def disk_cached(events: Events) -> int:
    """Of a generation's cached prompt tokens, those its prefix cache read from disk: what its
    last event's usage says (Omni's `omni_disk_cached_tokens`; 0 when it says nothing)."""
    if not events:
        return 0
    ending = json_object(events[-1][1])
    usage = ending.get("usage") or (ending.get("response") or {}).get("usage") or {}
    details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    return int(details.get("omni_disk_cached_tokens") or 0)


def json_object(data: str) -> dict[str, Any]:
    """A stored JSON text as an object ({} if it is none)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _ending(events: Events, type_: str) -> dict[str, Any]:
    """The data of the stream's first `type_` event ({} if none)."""
    return next((json_object(d) for t, d in events if t == type_), {})


def _response(kind: str, events: Events, request: dict[str, Any]) -> Output:
    return response_output(fold_response(events))


def _nothing(kind: str, events: Events, request: dict[str, Any]) -> Output:
    """Vectors are never kept: no output to show."""
    return Output("", [], "")


def _speech(kind: str, events: Events, request: dict[str, Any]) -> Output:
    """Nor audio: how long it was."""
    return Output(speech_output(_ending(events, SPEECH_COMPLETED)), [], "")


def _images(kind: str, events: Events, request: dict[str, Any]) -> Output:
    """Nor pictures: how many, how big."""
    return Output(images_output(request, _ending(events, IMAGES_COMPLETED)), [], "")


def _transcript(kind: str, events: Events, request: dict[str, Any]) -> Output:
    return Output(transcript_text(events), [], "")


def _message(kind: str, events: Events, request: dict[str, Any]) -> Output:
    return message_output(fold_message(events))


def _conversation(kind: str, events: Events, request: dict[str, Any]) -> Output:
    """Its items as a response's output: the messages' text (a line each), the calls."""
    items = fold_items(events)
    lines = [f"{i.get('role')}: {response_output({'output': [i]})[0]}"
             for i in items if i.get("type") == "message"]  # fmt: skip
    return Output("\n".join(lines), response_output({"output": items}).tool_calls, "")


def _completion(kind: str, events: Events, request: dict[str, Any]) -> Output:
    fold = fold_chat if kind == "chat.completion" else fold_text
    pairs = [(t, d) for t, d in events if t.endswith(".chunk") or t.endswith(".usage")]
    return completion_output(kind, fold(pairs))


# An object's output, by its kind (tests/test_modalities.py: every kind has one).
OUTPUTS: dict[str, Callable[[str, Events, dict[str, Any]], Output]] = {
    "response": _response,
    "chat.completion": _completion,
    "text_completion": _completion,
    "embedding": _nothing,
    "speech": _speech,
    "image": _images,
    "transcription": _transcript,
    "message": _message,
    "conversation": _conversation,
}


def object_output(kind: str, events: Events, request: dict[str, Any]) -> Output:
    """An object's output from its public stream (and its accepted request)."""
    return OUTPUTS.get(kind, _completion)(kind, events, request)
