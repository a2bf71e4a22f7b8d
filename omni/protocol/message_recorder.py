"""Engine outputs → Anthropic's Messages stream events. Pure.

A message's stream is its events exactly as sent: `message_start`; each content block as
`content_block_start`, its deltas and `content_block_stop`; `message_delta` with the stop
reason and the usage; `message_stop`. A failure ends with Anthropic's `error` event, a cancel
with an event never sent. The answer, the thinking, the tool calls and the stop strings are
read out of the output by a chat completion's recorder (omni.protocol.chat_recorder), whose
chunks this one turns into blocks: both APIs say the same thing of one generation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni.ports.jobs import Output
from omni.protocol.chat_recorder import ChunkRecorder
from omni.vocabulary import (
    BLOCK_DELTA,
    BLOCK_START,
    BLOCK_STOP,
    COMPLETION_CANCELLED,
    COMPLETION_ERROR,
    COMPLETION_USAGE,
    MESSAGE_CANCELLED,
    MESSAGE_DELTA,
    MESSAGE_ERROR,
    MESSAGE_START,
    MESSAGE_STOP,
)

Event = tuple[str, dict[str, Any]]
# A chat completion's finish reason → Anthropic's stop reason.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def message_error(message: str, type_: str = "api_error") -> Event:
    """Anthropic's `error` event: how a message's stream ends failed."""
    return MESSAGE_ERROR, {"type": "error", "error": {"type": type_, "message": message}}


def tool_use_id(call_id: str) -> str:
    """A tool call's id as Anthropic spells it (`toolu_…`)."""
    return "toolu_" + call_id.removeprefix("call_")


class MessageRecorder:
    """Builds the events of one message from the chunks of `chunks`, a chat recorder of the
    same generation; `seal` turns a thinking block's text into its signature."""

    kind = "messages"  # as /metrics labels its API

    def __init__(
        self,
        chunks: ChunkRecorder,
        message_id: str,
        model: str,
        prompt_tokens: int,
        seal: Callable[[str], str],
    ):
        self.chunks = chunks
        self.message_id = message_id
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.seal = seal
        self.base = chunks.base  # its `created`, which the accepted request records
        self.next_seq = 0
        self._block: str | None = None  # the type of the block open now
        self._index = -1
        self._thinking: list[str] = []
        self._stop_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.chunks.done

    @property
    def wants_stop(self) -> bool:
        """A stop sequence was seen: the engine may stop generating."""
        return self.chunks.wants_stop

    def opening(self) -> list[Event]:
        usage = {
            "input_tokens": self.prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        }
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        self.chunks.opening()  # the chat recorder's role chunk: nothing a message sends
        return self._sent([(MESSAGE_START, {"type": MESSAGE_START, "message": message})])

    def on_output(self, out: Output) -> list[Event]:
        events: list[Event] = []
        for type_, chunk in self.chunks.on_output(out):
            events += self._translated(type_, chunk)
        return self._sent(events)

    def _sent(self, events: list[Event]) -> list[Event]:
        self.next_seq += len(events)
        return events

    def _translated(self, type_: str, chunk: dict[str, Any]) -> list[Event]:
        if type_ == COMPLETION_ERROR:
            return [*self._close(), message_error(chunk["error"]["message"])]
        if type_ == COMPLETION_CANCELLED:
            return [(MESSAGE_CANCELLED, {})]
        if type_ in COMPLETION_USAGE.values():
            return self._end(chunk["usage"])
        choice = chunk["choices"][0]
        delta = choice["delta"]
        events: list[Event] = []
        if delta.get("reasoning_content"):
            events += self._delta("thinking", {"type": "thinking_delta", "thinking": ""}, delta)
        if delta.get("content"):
            events += self._delta("text", {"type": "text_delta", "text": ""}, delta)
        for call in delta.get("tool_calls") or []:
            events += self._tool_use(call)
        if choice.get("finish_reason"):
            events += self._close()
            self._stop_reason = STOP_REASONS.get(choice["finish_reason"], "end_turn")
        return events

    def _delta(self, block: str, shape: dict[str, Any], delta: dict[str, Any]) -> list[Event]:
        """Text or thinking: into the open block of its type, else a new one."""
        events = self._open(block) if self._block != block else []
        text = delta["reasoning_content" if block == "thinking" else "content"]
        if block == "thinking":
            self._thinking.append(text)
        key = "thinking" if block == "thinking" else "text"
        return [*events, self._event(BLOCK_DELTA, delta={**shape, key: text})]

    def _open(self, block: str, **fields: Any) -> list[Event]:
        events = self._close()
        self._block, self._index = block, self._index + 1
        content: dict[str, Any] = {"type": block}
        if block == "text":
            content["text"] = ""
        elif block == "thinking":
            content |= {"thinking": "", "signature": ""}
        return [*events, self._event(BLOCK_START, content_block=content | fields)]

    def _close(self) -> list[Event]:
        if self._block is None:
            return []
        events = []
        if self._block == "thinking":
            signature = self.seal("".join(self._thinking))
            self._thinking = []
            events.append(
                self._event(BLOCK_DELTA, delta={"type": "signature_delta", "signature": signature})
            )
        self._block = None
        return [*events, self._event(BLOCK_STOP)]

    def _tool_use(self, call: dict[str, Any]) -> list[Event]:
        function = call["function"]
        events = self._open("tool_use", id=tool_use_id(call["id"]), name=function["name"], input={})
        json_delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
        events.append(self._event(BLOCK_DELTA, delta=json_delta))
        return [*events, *self._close()]

    def _event(self, type_: str, **fields: Any) -> Event:
        return type_, {"type": type_, "index": self._index, **fields}

    def _end(self, usage: dict[str, Any]) -> list[Event]:
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        stops = self.chunks.stops
        reason = "stop_sequence" if stops.stopped else self._stop_reason or "end_turn"
        delta = {
            "type": MESSAGE_DELTA,
            "delta": {"stop_reason": reason, "stop_sequence": stops.matched},
            "usage": {
                "input_tokens": usage["prompt_tokens"] - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": usage["completion_tokens"],
            },
        }
        return [*self._close(), (MESSAGE_DELTA, delta), (MESSAGE_STOP, {"type": MESSAGE_STOP})]
