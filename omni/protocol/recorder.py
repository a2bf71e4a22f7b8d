"""The recorder's mapping: engine outputs in, OpenAI Responses stream events out.

Pure: it holds the response being built and hands back event payloads with their
sequence numbers; the service appends them. It is the only author of `resp_X` after
`response.created` / `response.in_progress`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from omni.ids import new_id
from omni.ports.jobs import (
    Delta,
    Failed,
    Finished,
    Logprobs,
    Output,
    Prefilled,
    Started,
    TokenLogprob,
)
from omni.protocol.thinking import ThinkSplitter
from omni.tools.calls import Call, CallSplitter, Segment, routed
from omni.vocabulary import RESPONSE_ENDS

__all__ = ["RESPONSE_ENDS", "ResponseRecorder", "usage"]

Event = dict[str, Any]

# The SDK knows no "response.cancelled" event (strict clients reject unknown types), so a
# cancelled response ends with response.incomplete whose response carries status "cancelled".
_TERMINAL_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "cancelled": "response.incomplete",
}


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    disk_tokens: int = 0,
) -> dict[str, Any]:
    """A response's usage; `disk_tokens`, of the cached ones, those the prefix cache read from
    its disk tier (Omni's `omni_disk_cached_tokens`, there only when some were)."""
    details: dict[str, Any] = {"cached_tokens": cached_tokens, "cache_write_tokens": 0}
    if disk_tokens:
        details["omni_disk_cached_tokens"] = disk_tokens
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": details,
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def json_copy(value: Any) -> Any:
    """A copy of JSON data (dicts, lists, scalars): what copy.deepcopy makes, for a fraction
    of its cost (a response is copied into each lifecycle event)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


class ResponseRecorder:
    """Builds one response's events; `next_seq` continues where the log ends."""

    def __init__(
        self,
        response: dict[str, Any],
        next_seq: int,
        splitter: CallSplitter | None = None,
        thinker: ThinkSplitter | None = None,
        seal: Callable[[list[dict[str, Any]]], str] | None = None,
    ):
        self.response = json_copy(response)
        self.seal = seal  # reasoning content → encrypted_content, when the client asks
        self.splitter = splitter  # function calls out of the text, when the request has tools
        self.thinker = thinker  # reasoning out of the text, for a reasoning model
        self._reasoning: dict[str, Any] | None = None  # the open reasoning item
        self.reasoning_text = ""
        self.reasoning_tokens = 0
        self.next_seq = next_seq
        self.text = ""
        self.logprobs: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._message: dict[str, Any] | None = None
        self.done = False

    @classmethod
    def resume(
        cls,
        folded: dict[str, Any],
        next_seq: int,
        splitter: CallSplitter | None = None,
        thinker: ThinkSplitter | None = None,
    ) -> ResponseRecorder:
        """A recorder that carries on a log left unfinished (e.g. by a crash): an
        in-progress message item stays open, its text so far kept; the splitters carry on
        from what the log says was said (calls made, a think block open or closed)."""
        output = list(folded.get("output", []))
        open_item = output.pop() if output and output[-1].get("status") == "in_progress" else None
        recorder = cls({**folded, "output": output}, next_seq, splitter, thinker)
        if open_item is not None and open_item["type"] == "reasoning":
            parts = open_item.get("content") or [{"text": ""}]
            recorder._reasoning = {k: v for k, v in open_item.items() if k != "content"}
            recorder.reasoning_text = parts[0]["text"]
        elif open_item is not None:
            # item.added and content_part.added are always committed together
            parts = open_item.get("content") or [{"text": ""}]
            recorder._message = {**open_item, "content": []}
            recorder.text = parts[0]["text"]
            recorder.logprobs = list(parts[0].get("logprobs") or [])
        said = output or recorder.text or recorder._reasoning is not None
        if recorder.thinker is not None and said:
            recorder.thinker.carry_on(inside=recorder._reasoning is not None)
        if recorder.splitter is not None:  # calls made before count toward max_calls
            recorder.splitter.calls = sum(item["type"] == "function_call" for item in output)
        return recorder

    def _event(self, type_: str, **fields: Any) -> Event:
        event = {"type": type_, "sequence_number": self.next_seq, **fields}
        self.next_seq += 1
        return event

    def _lifecycle(self, type_: str) -> Event:
        return self._event(type_, response=json_copy(self.response))

    def opening(self, prelude: Sequence[dict[str, Any]] = ()) -> list[Event]:
        """response.created, then response.queued (background) or response.in_progress; then
        each item of `prelude` (a compaction made before generating) added and done."""
        follow = (
            "response.queued" if self.response["status"] == "queued" else "response.in_progress"
        )
        events = [self._lifecycle("response.created"), self._lifecycle(follow)]
        for item in prelude:
            index = len(self.response["output"])
            events.append(self._event("response.output_item.added", output_index=index, item=item))
            events.append(self._event("response.output_item.done", output_index=index, item=item))
            self.response["output"].append(json_copy(item))
        return events

    def on_output(self, out: Output) -> list[Event]:
        if isinstance(out, Started):
            return self.on_started()
        if isinstance(out, Prefilled):  # progress is recorded on a stream of its own
            return []
        if isinstance(out, Delta):
            return self.on_delta(out.text, out.logprobs, token=out.token is not None)
        if isinstance(out, Finished):
            return self.on_finished(out)
        return self.on_failed(out)

    def on_started(self) -> list[Event]:
        if self.response["status"] != "queued":
            return []
        self.response["status"] = "in_progress"
        return [self._lifecycle("response.in_progress")]

    def _open_message(self) -> list[Event]:
        self._message = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        index = len(self.response["output"])
        return [
            self._event("response.output_item.added", output_index=index, item=dict(self._message)),
            self._event(
                "response.content_part.added",
                item_id=self._message["id"],
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            ),
        ]

    def on_delta(
        self, text: str, logprobs: Logprobs | None = None, token: bool = True
    ) -> list[Event]:
        """`token`: the text completes a generated token (not the detokenizer's last flush)."""
        if logprobs is not None:
            self._pending.append(_logprob(logprobs))
        if self.thinker is None:
            return self._answer(text)
        if self.thinker.inside and token:
            self.reasoning_tokens += 1
        events: list[Event] = []
        for kind, part in self.thinker.feed(text):
            events += self._reason(part) if kind == "reasoning" else self._answer(part)
        return events

    def _answer(self, text: str) -> list[Event]:
        events = self._close_reasoning("completed") if self._reasoning is not None and text else []
        if self.splitter is not None:
            return events + self._segments(self.splitter.feed(text))
        return events + self._text(text)

    def _reason(self, text: str) -> list[Event]:
        """Reasoning text: a reasoning item with one reasoning_text part, streamed."""
        events: list[Event] = []
        index = len(self.response["output"])
        if self._reasoning is None:
            self._reasoning = {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "status": "in_progress",
            }
            part = {"type": "reasoning_text", "text": ""}
            events += [
                self._event(
                    "response.output_item.added", output_index=index, item=dict(self._reasoning)
                ),
                self._event(
                    "response.content_part.added",
                    item_id=self._reasoning["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
            ]
        self._pending = []  # reasoning tokens carry no output_text logprobs
        self.reasoning_text += text
        events.append(
            self._event(
                "response.reasoning_text.delta",
                item_id=self._reasoning["id"],
                output_index=index,
                content_index=0,
                delta=text,
            )
        )
        return events

    def _part_done(
        self, kind: str, item_id: str, index: int, part: dict[str, Any], **extra: Any
    ) -> list[Event]:
        """`<kind>.done` with the part's full text, then `content_part.done`."""
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self._event(f"response.{kind}.done", **where, text=part["text"], **extra),
            self._event("response.content_part.done", **where, part=part),
        ]

    def _close_reasoning(self, status: str) -> list[Event]:
        assert self._reasoning is not None
        item_id, index = self._reasoning["id"], len(self.response["output"])
        part = {"type": "reasoning_text", "text": self.reasoning_text}
        item = {**self._reasoning, "content": [part], "status": status}
        if self.seal is not None:
            item["encrypted_content"] = self.seal([part])
        events = self._part_done("reasoning_text", item_id, index, part)
        if (self.response.get("reasoning") or {}).get("summary"):
            # No separate summarizer runs here: the summary is the reasoning itself, in full.
            summary = {"type": "summary_text", "text": self.reasoning_text}
            item["summary"] = [summary]
            where = {"item_id": item_id, "output_index": index, "summary_index": 0}
            events += [
                self._event(
                    "response.reasoning_summary_part.added",
                    **where,
                    part={"type": "summary_text", "text": ""},
                ),
                self._event(
                    "response.reasoning_summary_text.delta", **where, delta=self.reasoning_text
                ),
                self._event(
                    "response.reasoning_summary_text.done", **where, text=self.reasoning_text
                ),
                self._event("response.reasoning_summary_part.done", **where, part=summary),
            ]
        events.append(self._event("response.output_item.done", output_index=index, item=item))
        self.response["output"].append(item)
        self._reasoning = None
        return events

    def _segments(self, segments: list[Segment]) -> list[Event]:
        return routed(segments, self._text, self._function_call)

    def _function_call(self, call: Call) -> list[Event]:
        """A complete call: its item opens, its arguments stream, it closes."""
        events = self._close_message("completed") if self._message is not None else []
        self._pending = []  # the call's tokens carry no output_text logprobs
        index = len(self.response["output"])
        item: dict[str, Any] = {
            "id": new_id("fc"),
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": new_id("call"),
            "name": call.name,
        }
        done = {**item, "arguments": call.arguments, "status": "completed"}
        events += [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=call.arguments,
            ),
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=call.arguments,
                name=call.name,
            ),
            self._event("response.output_item.done", output_index=index, item=done),
        ]
        self.response["output"].append(done)
        return events

    def _text(self, text: str) -> list[Event]:
        if not text:
            return []  # e.g. half a character: its logprobs go out with the text
        scored, self._pending = self._pending, []
        self.logprobs += scored
        events = self._open_message() if self._message is None else []
        assert self._message is not None
        self.text += text
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=self._message["id"],
                output_index=len(self.response["output"]),
                content_index=0,
                delta=text,
                logprobs=scored,
            )
        )
        return events

    def _close_message(self, status: str) -> list[Event]:
        events = self._open_message() if self._message is None else []
        assert self._message is not None
        item_id, index = self._message["id"], len(self.response["output"])
        part = {
            "type": "output_text",
            "text": self.text,
            "annotations": [],
            "logprobs": self.logprobs,
        }
        item = {**self._message, "status": status, "content": [part]}
        events += [
            *self._part_done("output_text", item_id, index, part, logprobs=self.logprobs),
            self._event("response.output_item.done", output_index=index, item=item),
        ]
        self.response["output"].append(item)
        self._message = None
        return events

    def on_finished(self, out: Finished) -> list[Event]:
        self.done = True
        status = {"stop": "completed", "length": "incomplete", "cancelled": "cancelled"}[out.reason]
        ended = "completed" if status == "completed" else "incomplete"
        events: list[Event] = []
        for kind, part in self.thinker.finish() if self.thinker is not None else []:
            events += self._reason(part) if kind == "reasoning" else self._answer(part)
        if self._reasoning is not None:
            events += self._close_reasoning(ended)
        if self.splitter is not None:
            events += self._segments(self.splitter.finish(cut=status != "completed"))
        # No message when nothing was said: cancelled before output, only calls, or a call
        # cut short (dropped).
        said = bool(self.response["output"]) or bool(self.splitter and self.splitter.dropped)
        if self._message is not None or (status != "cancelled" and not said):
            events += self._close_message(ended)
        self.response["status"] = status
        self.response["usage"] = usage(
            out.prompt_tokens,
            out.completion_tokens,
            out.cached_tokens,
            self.reasoning_tokens,
            out.disk_tokens,
        )
        if status == "completed":
            self.response["completed_at"] = int(time.time())
        if status == "incomplete":
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        events.append(self._lifecycle(_TERMINAL_EVENT[status]))
        return events

    def on_abandoned(self, reason: str) -> list[Event]:
        """End without finishing, for a reason that is not an error of the generation
        (e.g. it cannot be continued after a restart): incomplete, the reason in `error`."""
        self.done = True
        events = self._close_reasoning("incomplete") if self._reasoning is not None else []
        events += self._close_message("incomplete") if self._message is not None else []
        self.response["status"] = "incomplete"
        self.response["error"] = {"code": "server_error", "message": reason}
        events.append(self._lifecycle("response.incomplete"))
        return events

    def on_failed(self, out: Failed) -> list[Event]:
        self.done = True
        events = self._close_reasoning("incomplete") if self._reasoning is not None else []
        events += self._close_message("incomplete") if self._message is not None else []
        self.response["status"] = "failed"
        self.response["error"] = {"code": "server_error", "message": out.message}
        events.append(self._lifecycle("response.failed"))
        return events


def _entry(t: TokenLogprob) -> dict[str, Any]:
    return {"token": t.token, "bytes": list(t.bytes), "logprob": t.logprob}


def _logprob(scored: Logprobs) -> dict[str, Any]:
    """One token's logprob in the shape of output_text's `logprobs` entries."""
    return {**_entry(scored.chosen), "top_logprobs": [_entry(t) for t in scored.top]}
