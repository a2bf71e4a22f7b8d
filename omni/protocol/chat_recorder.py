"""Engine outputs → chat.completion.chunk (and legacy text_completion) events. Pure.

A completion's stream is the chunks exactly as sent: the role chunk, content chunks, the chunk
with `finish_reason`, then one usage chunk (`choices: []`, sent only to clients that asked for
`include_usage`). A failure ends with an error event, a cancel with an event never sent.
"""

from __future__ import annotations

from typing import Any, Literal

from omni.ids import new_id
from omni.ports.jobs import Delta, Failed, Finished, Logprobs, Output, Prefilled, Started
from omni.protocol.stops import StopMatcher
from omni.protocol.thinking import ThinkSplitter
from omni.tools.calls import Call, CallSplitter, Segment, routed
from omni.vocabulary import (
    COMPLETION_CANCELLED,
    COMPLETION_CHUNK,
    COMPLETION_ERROR,
    COMPLETION_USAGE,
)

ChunkEvent = tuple[str, dict[str, Any]]
Kind = Literal["chat", "text"]


def error_event(message: str) -> ChunkEvent:
    """The event that ends a completion failed (a chunk stream has no failed chunk)."""
    error = {"message": message, "type": "server_error", "param": None}
    return (COMPLETION_ERROR, {"error": {**error, "code": "server_error"}})


class ChunkRecorder:
    """Builds the chunk events of one chat (or legacy text) completion."""

    def __init__(
        self,
        kind: Kind,
        completion_id: str,
        model: str,
        created: int,
        stops: list[str] | None = None,
        logprobs: bool = False,
        prefix: str = "",
        splitter: CallSplitter | None = None,
        thinker: ThinkSplitter | None = None,
    ):
        self.kind = kind
        self.splitter = splitter  # tool calls out of the text (chat with tools)
        self.thinker = thinker  # reasoning_content out of the text (reasoning models)
        self.reasoning_tokens = 0
        self.base = {
            "id": completion_id,
            "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": created,
            "model": model,
        }
        self.stops = StopMatcher(stops or [])
        self.logprobs = logprobs
        self.prefix = prefix  # legacy `echo`: the prompt goes out first
        self.next_seq = 0
        self.done = False
        self.finish_reason: str | None = None
        self._pending: list[Logprobs] = []
        self._offset = 0  # legacy logprobs' text_offset
        self._calls = 0
        self._tokens = 0  # generated up to the stop sequence, if one is seen

    @property
    def wants_stop(self) -> bool:
        """A stop sequence was seen: the engine may stop generating."""
        return self.stops.stopped

    def opening(self) -> list[ChunkEvent]:
        if self.kind == "chat":
            # As OpenAI's: "" opens a text answer; where a call may come instead, null (a
            # client such as the AI SDK makes an empty text part of any string).
            content = None if self.splitter is not None else ""
            return [self._chunk({"role": "assistant", "content": content})]
        return [self._chunk(self.prefix)] if self.prefix else []

    def on_output(self, out: Output) -> list[ChunkEvent]:
        if self.done or isinstance(out, Started | Prefilled):  # progress: its own stream
            return []
        if isinstance(out, Delta):
            if self.stops.stopped:
                return []  # generated past a stop sequence: not part of the answer
            self._tokens += out.token is not None
            if out.logprobs is not None and self.logprobs:
                self._pending.append(out.logprobs)
            events = self._text(self.stops.feed(out.text), token=out.token is not None)
            if self.stops.stopped:
                self._pending = []
            return events
        if isinstance(out, Failed):
            self.done = True
            return [error_event(out.message)]
        return self._finish(out)

    def _text(
        self, text: str, final: bool = False, token: bool = False, cut: bool = False
    ) -> list[ChunkEvent]:
        """`token`: the text completes a generated token (counted as reasoning inside a
        think block); not so the detokenizer's last flush or the stop matcher's. `cut`: the
        final text, of an output the limit (or a cancel) cut short."""
        if self.thinker is None:
            return self._answer(text, final, cut)
        if self.thinker.inside and token:
            self.reasoning_tokens += 1
        parts = self.thinker.feed(text) + (self.thinker.finish() if final else [])
        events: list[ChunkEvent] = []
        for kind, part in parts:
            if kind == "reasoning":
                events.append(self._chunk({"reasoning_content": part}))
            else:
                events += self._answer(part)
        return events + (self._answer("", final, cut) if final else [])

    def _answer(self, text: str, final: bool = False, cut: bool = False) -> list[ChunkEvent]:
        if self.splitter is None:
            return self._emit(text)
        segments = self.splitter.feed(text)
        if final:
            segments += self.splitter.finish(cut)
        return self._segments(segments)

    def _segments(self, segments: list[Segment]) -> list[ChunkEvent]:
        return routed(segments, self._emit, self._call)

    def _call(self, value: Call) -> list[ChunkEvent]:
        index = self._calls
        self._calls += 1
        call = {
            "index": index,
            "id": new_id("call"),
            "type": "function",
            "function": {"name": value.name, "arguments": value.arguments},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _emit(self, text: str) -> list[ChunkEvent]:
        if not text:
            return []
        if self.kind == "chat":
            return [self._chunk({"content": text})]
        return [self._chunk(text)]

    def _finish(self, out: Finished) -> list[ChunkEvent]:
        self.done = True
        cut = out.reason != "stop" and not self.stops.stopped
        events = self._text(self.stops.flush(), final=True, cut=cut)
        if out.reason == "cancelled" and not self.stops.stopped:
            return [*events, (COMPLETION_CANCELLED, {})]
        self.finish_reason = "stop" if out.reason == "stop" or self.stops.stopped else "length"
        if self._calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"
        events.append(
            self._chunk({} if self.kind == "chat" else "", finish_reason=self.finish_reason)
        )
        # Tokens the engine made after the stop sequence, before it saw the cancel, are not
        # part of the answer and not billed as such.
        completion = out.completion_tokens
        if self.stops.stopped:
            completion = min(self._tokens, completion)
        usage = {
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": out.prompt_tokens + completion,
            "prompt_tokens_details": cached_details(out),
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }
        events.append((COMPLETION_USAGE[self.kind], {**self.base, "choices": [], "usage": usage}))
        return events

    def _chunk(self, delta: Any, finish_reason: str | None = None) -> ChunkEvent:
        choice: dict[str, Any] = {"index": 0}
        if self.kind == "chat":
            choice["delta"] = delta
        else:
            choice["text"] = delta
        choice["logprobs"] = self._take_logprobs(delta) if self.logprobs else None
        choice["finish_reason"] = finish_reason
        self.next_seq += 1
        return COMPLETION_CHUNK[self.kind], {**self.base, "choices": [choice], "usage": None}

    def _take_logprobs(self, delta: Any) -> dict[str, Any] | None:
        pending, self._pending = self._pending, []
        if self.kind == "chat":
            content = [
                {**_entry(p.chosen), "top_logprobs": [_entry(t) for t in p.top]} for p in pending
            ]
            return {"content": content, "refusal": None}
        offsets = []
        for p in pending:
            offsets.append(self._offset)
            self._offset += len(p.chosen.token)
        if not pending and isinstance(delta, str):
            self._offset += len(delta)  # echoed prompt text carries no logprobs
        return {
            "tokens": [p.chosen.token for p in pending],
            "token_logprobs": [p.chosen.logprob for p in pending],
            "top_logprobs": [_by_text(p.top) for p in pending],
            "text_offset": offsets,
        }


def _entry(t: Any) -> dict[str, Any]:
    return {"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}


def _by_text(top: tuple[Any, ...]) -> dict[str, float]:
    """Legacy top_logprobs map text to logprob; tokens that decode alike keep the best."""
    best: dict[str, float] = {}
    for t in top:
        best[t.token] = max(t.logprob, best.get(t.token, t.logprob))
    return best


def cached_details(out: Finished) -> dict[str, int]:
    """`prompt_tokens_details`: the cached tokens, and of those the ones the prefix cache read
    from its disk tier (Omni's `omni_disk_cached_tokens`, there only when some were)."""
    details = {"cached_tokens": out.cached_tokens}
    if out.disk_tokens:
        details["omni_disk_cached_tokens"] = out.disk_tokens
    return details
