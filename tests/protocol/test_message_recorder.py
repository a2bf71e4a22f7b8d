"""MessageRecorder (pure): engine outputs → Anthropic's stream events, each valid as the
Anthropic SDK's own types, and folded (omni.projections.messages) into the message the SDK's
stream helper assembles from the same events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from omni.ports.chat import ToolFormat
from omni.ports.jobs import Delta, Failed, Finished, Output
from omni.projections.messages import fold_message
from omni.protocol.chat_recorder import ChunkRecorder
from omni.protocol.message_recorder import MessageRecorder
from omni.protocol.thinking import ThinkSplitter
from omni.tools.calls import CallSplitter
from omni.vocabulary import MESSAGE_CANCELLED, MESSAGE_ENDS, MESSAGE_ERROR, MESSAGE_START

MID = "msg_test"
EVENT = TypeAdapter(RawMessageStreamEvent)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]
CALL = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})


def recorder(stops: list[str] | None = None, tools: bool = False, think: bool = False) -> Any:
    chunks = ChunkRecorder(
        "chat",
        MID,
        "tiny-llama",
        1700000000,
        stops=stops,
        splitter=CallSplitter(ToolFormat(), TOOLS) if tools else None,
        thinker=ThinkSplitter("<think>", "</think>") if think else None,
    )
    return MessageRecorder(chunks, MID, "tiny-llama", 12, lambda text: f"sealed:{text}")


def run(rec: MessageRecorder, outputs: list[Output]) -> list[tuple[str, dict[str, Any]]]:
    events = rec.opening()
    for out in outputs:
        events += rec.on_output(out)
    return events


def deltas(text: str) -> list[Output]:
    return [Delta(c, n) for n, c in enumerate(text)]


def sdk_message(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """What the SDK's stream helper assembles from the events (each parsed as its type)."""
    snapshot = None
    for _, data in events:
        event = EVENT.validate_python(data)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs={})
    assert snapshot is not None
    return Message.model_validate(snapshot.model_dump()).model_dump(exclude_none=True)


def folded(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    message = fold_message([(t, json.dumps(d)) for t, d in events])
    return Message.model_validate(message).model_dump(exclude_none=True)


def test_a_text_answer_is_one_text_block_then_the_stop() -> None:
    rec = recorder()
    events = run(rec, [*deltas("Hello"), Finished("stop", 12, 5, cached_tokens=8)])
    assert [t for t, _ in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert rec.next_seq == len(events) and rec.done
    message = folded(events)
    assert message["content"] == [{"type": "text", "text": "Hello"}]
    assert message["stop_reason"] == "end_turn"
    assert message["usage"] == {
        "input_tokens": 4,
        "output_tokens": 5,
        "cache_read_input_tokens": 8,
        "cache_creation_input_tokens": 0,
    }
    assert sdk_message(events) == message


def test_the_limit_is_max_tokens() -> None:
    events = run(recorder(), [*deltas("Hi"), Finished("length", 12, 2)])
    assert folded(events)["stop_reason"] == "max_tokens"


def test_a_stop_sequence_names_the_string_seen() -> None:
    rec = recorder(stops=["END", "lo"])
    events = run(rec, [*deltas("HelloEND more"), Finished("cancelled", 12, 13)])
    message = folded(events)
    assert rec.wants_stop
    assert message["content"] == [{"type": "text", "text": "Hel"}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "lo")
    assert sdk_message(events) == message


def test_a_tool_call_is_a_tool_use_block_with_its_input() -> None:
    events = run(recorder(tools=True), [*deltas(f"[{CALL}]"), Finished("stop", 12, 30)])
    message = folded(events)
    [block] = message["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_")
    assert (block["name"], block["input"]) == ("get_weather", {"city": "Paris"})
    assert message["stop_reason"] == "tool_use"
    assert sdk_message(events) == message


def test_thinking_is_a_block_sealed_by_its_signature() -> None:
    output = "<think>a plan</think>The answer."
    events = run(recorder(think=True), [*deltas(output), Finished("stop", 12, 30)])
    message = folded(events)
    assert message["content"] == [
        {"type": "thinking", "thinking": "a plan", "signature": "sealed:a plan"},
        {"type": "text", "text": "The answer."},
    ]
    signature = [d for _, d in events if d.get("delta", {}).get("type") == "signature_delta"]
    assert len(signature) == 1  # once, just before the block's stop
    assert sdk_message(events) == message


@pytest.mark.parametrize(
    ("end", "last"), [(Failed("boom"), MESSAGE_ERROR), (Finished("cancelled", 12, 1), None)]
)
def test_a_failure_ends_with_an_error_event_and_a_cancel_with_one_never_sent(
    end: Output, last: str | None
) -> None:
    events = run(recorder(), [*deltas("H"), end])
    assert events[0][0] == MESSAGE_START
    assert events[-1][0] in MESSAGE_ENDS
    if last is None:
        assert events[-1] == (MESSAGE_CANCELLED, {})
        return
    assert events[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert [t for t, _ in events[:-1]].count("content_block_stop") == 1  # the block was closed
