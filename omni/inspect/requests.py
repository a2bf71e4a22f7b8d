"""What a request asked, for people, whole: its model, sampling, instructions, every input
item (omni/inspect/inputs.py), its tools, tool choice, response format and metadata,
summarized by the kind of object it made."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from omni.inspect import inputs
from omni.inspect.inputs import InputItem

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
    "n",
    "reasoning_effort",
    "parallel_tool_calls",
)


class RequestSummary(TypedDict):
    model: Any  # as the request named it
    sampling: dict[str, Any]
    instructions: Any
    input: list[InputItem]
    stream: bool
    tools: list[Any]  # whole, as the request gave them (their schemas too)
    tool_choice: Any
    response_format: Any  # a JSON schema, where one was asked for; else None
    metadata: dict[str, Any]


def _summary(
    body: dict[str, Any],
    *,
    sampling: dict[str, Any] | None = None,
    instructions: Any = None,
    items: list[InputItem] | None = None,
    stream: bool = False,
    tools: list[Any] | None = None,
    tool_choice: Any = None,
    response_format: Any = None,
    metadata: dict[str, Any] | None = None,
) -> RequestSummary:
    return {
        "model": body.get("model"),
        "sampling": sampling or {},
        "instructions": instructions,
        "input": items or [],
        "stream": stream,
        "tools": tools or [],
        "tool_choice": tool_choice,
        "response_format": response_format,
        "metadata": metadata or {},
    }


def _embedding(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """Its inputs' text is not kept: how many, and their tokens."""
    n, tokens = doc.get("inputs"), doc.get("prompt_tokens")
    told = f"{n} input{'' if n == 1 else 's'}, {tokens} token{'' if tokens == 1 else 's'}"
    return _summary(body, items=inputs.told("embedding_input", told))


def _speech(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The text spoken, as a response's input is kept."""
    return _summary(
        body,
        sampling={k: body[k] for k in ("voice", "speed", "response_format") if k in body},
        instructions=body.get("instructions"),
        items=[inputs.item("speech_input", None, [inputs.text(body.get("input") or "")])],
        stream=body.get("stream_format") == "sse",
    )


def _image(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The prompt drawn, as a response's input is kept."""
    drawn: dict[str, Any] = {k: doc[k] for k in ("size", "quality", "steps", "seed") if k in doc}
    drawn.update({k: body[k] for k in ("n", "output_format") if k in body})
    prompt = [inputs.text(body.get("prompt") or "")]
    return _summary(
        body,
        sampling=drawn,
        items=[inputs.item("image_prompt", None, prompt)],
        stream=bool(body.get("stream")),
    )


def _transcription(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """The audio is not kept: what it was."""
    audio = doc.get("audio") or {}
    told = f"{audio.get('filename')}: {audio.get('seconds')} s of audio ({doc.get('task')})"
    return _summary(
        body,
        sampling={k: body[k] for k in ("language", "temperature") if body.get(k)},
        instructions=body.get("prompt"),
        items=inputs.told("audio", told),
        stream=bool(body.get("stream")),
    )


def _conversation(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """A conversation asks nothing of a model: its metadata (its items are its output)."""
    return _summary({}, metadata=body.get("metadata") or {})


def _response(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    sampling = dict((doc.get("plan") or doc).get("sampling") or {})  # older: beside
    for name in ("reasoning", "parallel_tool_calls", "truncation", "include"):
        if body.get(name) not in (None, [], {}):
            sampling[name] = body[name]
    items = [inputs.response_item(i) for i in doc.get("input") or [] if isinstance(i, dict)]
    asked = (body.get("text") or {}).get("format")
    return _summary(
        body,
        sampling=sampling,
        instructions=body.get("instructions"),
        items=items,
        stream=bool(body.get("stream")),
        tools=body.get("tools") or [],
        tool_choice=body.get("tool_choice"),
        response_format=None if asked in (None, {"type": "text"}) else asked,
        metadata=body.get("metadata") or {},
    )


def _chat(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    asked = body.get("response_format")
    return _summary(
        body,
        sampling=_completion_sampling(body),
        items=[inputs.chat_message(m) for m in messages],
        stream=bool(body.get("stream")),
        tools=body.get("tools") or [],
        tool_choice=body.get("tool_choice"),
        response_format=None if asked in (None, {"type": "text"}) else asked,
        metadata=body.get("metadata") or {},
    )


def _text_completion(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    prompt = body.get("prompt")
    prompts = prompt if isinstance(prompt, list) else [prompt]
    items = [inputs.item("prompt", None, [inputs.text(p)]) for p in prompts if p is not None]
    return _summary(
        body,
        sampling=_completion_sampling(body),
        items=items,
        stream=bool(body.get("stream")),
        metadata=body.get("metadata") or {},
    )


# A message's settings (Anthropic's names; temperature 0 makes it replayable).
_MESSAGE_SAMPLING = (
    "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "thinking", "seed",
)  # fmt: skip


def _message(body: dict[str, Any], doc: dict[str, Any]) -> RequestSummary:
    """Anthropic's Messages: its system as instructions, its messages' blocks, its tools."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return _summary(
        body,
        sampling={k: body[k] for k in _MESSAGE_SAMPLING if body.get(k) is not None},
        instructions=inputs.blocks_text(body.get("system")) or None,
        items=[inputs.anthropic_message(m) for m in messages],
        stream=bool(body.get("stream")),
        tools=body.get("tools") or [],
        tool_choice=body.get("tool_choice"),
        response_format=body.get("output_config") or body.get("output_format"),
        metadata=body.get("metadata") or {},
    )


def _completion_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in _COMPLETION_SAMPLING if body.get(k) is not None}


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
    """An accepted request ({kind, body, ...}), whole, as people read it."""
    return SUMMARIES.get(kind, _text_completion)(doc.get("body") or {}, doc)


def conversation_of(request: dict[str, Any]) -> str | None:
    """The conversation whose turn an accepted response request is (None: none)."""
    within = (request.get("response") or {}).get("conversation")
    found = within.get("id") if isinstance(within, dict) else within
    return found if isinstance(found, str) else None
