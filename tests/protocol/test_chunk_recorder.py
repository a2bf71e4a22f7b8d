"""ChunkRecorder (pure): engine outputs → chat.completion.chunk / text_completion chunk events,
exactly the shapes the SDK expects, with a usage chunk and the terminal events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mlx_lm.tool_parsers import json_tools
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from omni.ports.chat import ToolFormat
from omni.ports.jobs import Delta, Failed, Finished, Logprobs, Started, TokenLogprob
from omni.protocol.chat_recorder import ChunkRecorder
from omni.tools.calls import CallSplitter
from omni.vocabulary import (
    COMPLETION_CANCELLED,
    COMPLETION_CHUNK,
    COMPLETION_ENDS,
    COMPLETION_ERROR,
    COMPLETION_USAGE,
)

CID = "chatcmpl-test"
CREATED = 1700000000


def lp(token: str, logprob: float = -0.5, top: tuple[tuple[str, float], ...] = ()) -> Logprobs:
    return Logprobs(
        TokenLogprob(token, tuple(token.encode()), logprob),
        tuple(TokenLogprob(t, tuple(t.encode()), v) for t, v in top),
    )


def chat(**kwargs: Any) -> ChunkRecorder:
    return ChunkRecorder("chat", CID, "tiny-llama", CREATED, **kwargs)


def text(**kwargs: Any) -> ChunkRecorder:
    return ChunkRecorder("text", "cmpl-test", "tiny-llama", CREATED, **kwargs)


def feed(rec: ChunkRecorder, outputs: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    events = rec.opening()
    for out in outputs:
        events += rec.on_output(out)
    return events


def contents(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(
        d["choices"][0]["delta"].get("content") or ""
        for t, d in events
        if t == COMPLETION_CHUNK["chat"] and d["choices"]
    )


def texts(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(
        d["choices"][0]["text"] for t, d in events if t == COMPLETION_CHUNK["text"] and d["choices"]
    )


def test_event_type_constants() -> None:
    assert COMPLETION_CHUNK == {"chat": "chat.completion.chunk", "text": "text_completion.chunk"}
    assert COMPLETION_USAGE == {"chat": "chat.completion.usage", "text": "text_completion.usage"}
    assert COMPLETION_ENDS == {*COMPLETION_USAGE.values(), COMPLETION_ERROR, COMPLETION_CANCELLED}


# --- chat ------------------------------------------------------------------------------


def test_chat_opening_is_the_role_chunk() -> None:
    rec = chat()
    [(type_, data)] = rec.opening()
    assert type_ == "chat.completion.chunk"
    assert data == {
        "id": CID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "tiny-llama",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "usage": None,
    }
    ChatCompletionChunk.model_validate(data)
    assert rec.next_seq == 1 and not rec.done and not rec.wants_stop


def test_chat_full_completion_order_and_shapes() -> None:
    rec = chat()
    events = feed(
        rec,
        [Started(), Delta("Hel", 1), Delta("", 2), Delta("lo", 3), Finished("stop", 7, 3, 2)],
    )
    types = [t for t, _ in events]
    assert types == [COMPLETION_CHUNK["chat"]] * 4 + [COMPLETION_USAGE["chat"]]
    deltas = [d["choices"][0]["delta"] for _, d in events[:-1]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert [d["choices"][0]["finish_reason"] for _, d in events[:-1]] == [None, None, None, "stop"]
    for _, d in events[:-1]:
        assert d["usage"] is None
        assert (d["id"], d["object"], d["created"], d["model"]) == (
            CID,
            "chat.completion.chunk",
            CREATED,
            "tiny-llama",
        )
        ChatCompletionChunk.model_validate(d)
    usage_chunk = events[-1][1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["object"] == "chat.completion.chunk"
    assert usage_chunk["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    ChatCompletionChunk.model_validate(usage_chunk)
    assert rec.done and rec.finish_reason == "stop"
    assert rec.next_seq == 4  # the chunks (the usage chunk is counted by the caller)


def test_chat_length_finish() -> None:
    rec = chat()
    events = feed(rec, [Delta("a", 1), Finished("length", 5, 1)])
    assert events[-2][1]["choices"][0]["finish_reason"] == "length"
    assert rec.finish_reason == "length"


def test_chat_outputs_after_the_end_are_ignored() -> None:
    rec = chat()
    feed(rec, [Delta("a", 1), Finished("length", 5, 1)])
    assert rec.on_output(Delta("b", 2)) == []
    assert rec.on_output(Finished("stop", 5, 2)) == []
    assert rec.on_output(Failed("boom")) == []


def test_chat_cancelled_without_stop_ends_with_cancelled_terminal() -> None:
    rec = chat()
    events = feed(rec, [Delta("abc", 1), Finished("cancelled", 5, 1)])
    assert events[-1] == (COMPLETION_CANCELLED, {})
    assert not any(t in COMPLETION_USAGE.values() for t, _ in events)
    assert all(
        d["choices"][0]["finish_reason"] is None for t, d in events if t == COMPLETION_CHUNK["chat"]
    )
    assert rec.done and rec.finish_reason is None


def test_chat_cancelled_flushes_held_text_that_was_not_a_stop() -> None:
    rec = chat(stops=["STOP"])
    events = feed(rec, [Delta("abc ST", 1), Finished("cancelled", 5, 1)])
    assert contents(events) == "abc ST"
    assert events[-1] == (COMPLETION_CANCELLED, {})


def test_chat_stop_sequence_gives_stop_and_wants_stop() -> None:
    rec = chat(stops=["STOP"])
    events = feed(rec, [Delta("hello ST", 1)])
    assert not rec.wants_stop
    events += rec.on_output(Delta("OP tail", 2))
    assert rec.wants_stop
    events += rec.on_output(Delta("more", 3))  # generated before the engine saw the cancel
    # The engine was asked to stop: it ends with "cancelled", which is a stop here.
    events += rec.on_output(Finished("cancelled", 5, 3))
    assert contents(events) == "hello "
    assert events[-2][1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert events[-1][0] == COMPLETION_USAGE["chat"]
    # The engine made 3 tokens; the answer ended inside the 2nd: 2 are counted.
    assert events[-1][1]["usage"]["completion_tokens"] == 2
    assert events[-1][1]["usage"]["total_tokens"] == 7
    assert rec.finish_reason == "stop"


def test_chat_stop_then_natural_length_end_is_still_stop() -> None:
    rec = chat(stops=["X"])
    events = feed(rec, [Delta("aXb", 1), Finished("length", 5, 1)])
    assert contents(events) == "a"
    assert rec.finish_reason == "stop"


def test_chat_failed_ends_with_an_error_event() -> None:
    rec = chat()
    events = feed(rec, [Delta("a", 1), Failed("kaput")])
    assert events[-1] == (
        COMPLETION_ERROR,
        {
            "error": {
                "message": "kaput",
                "type": "server_error",
                "param": None,
                "code": "server_error",
            }
        },
    )
    assert rec.done


def test_chat_without_logprobs_ignores_engine_logprobs() -> None:
    events = feed(chat(), [Delta("a", 1, lp("a")), Finished("length", 5, 1)])
    assert all(
        d["choices"][0]["logprobs"] is None for t, d in events if t == COMPLETION_CHUNK["chat"]
    )


def test_chat_logprobs_entries() -> None:
    rec = chat(logprobs=True)
    events = feed(
        rec,
        [
            Delta("é", 1, lp("é", -0.25, (("é", -0.25), ("x", -2.0)))),
            Delta("", 2, lp("\ufffd", -1.0)),  # half a character: held, no chunk yet
            Delta("ü", 3, lp("\ufffd", -0.75)),
            Finished("length", 5, 3),
        ],
    )
    chunks = [d for t, d in events if t == COMPLETION_CHUNK["chat"]]
    assert chunks[0]["choices"][0]["logprobs"] == {"content": [], "refusal": None}
    assert chunks[1]["choices"][0]["logprobs"] == {
        "content": [
            {
                "token": "é",
                "logprob": -0.25,
                "bytes": [195, 169],
                "top_logprobs": [
                    {"token": "é", "logprob": -0.25, "bytes": [195, 169]},
                    {"token": "x", "logprob": -2.0, "bytes": [120]},
                ],
            }
        ],
        "refusal": None,
    }
    # The held token's logprob goes out with the next chunk, in order.
    second = chunks[2]["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in second] == [-1.0, -0.75]
    assert all(e["top_logprobs"] == [] for e in second)
    for d in chunks:
        ChatCompletionChunk.model_validate(d)
    total = sum(len(d["choices"][0]["logprobs"]["content"]) for d in chunks)
    assert total == 3


def test_chat_logprobs_of_tokens_after_a_stop_are_not_reported() -> None:
    """Tokens generated after the stop sequence are not part of the answer: their logprobs
    must not be sent either (the text after the stop is dropped; so must its logprobs be)."""
    rec = chat(stops=["STOP"], logprobs=True)
    events = feed(
        rec,
        [
            Delta("ab", 1, lp("ab", -0.1)),
            Delta("STOP", 2, lp("STOP", -0.2)),
            Delta("zz", 3, lp("zz", -0.3)),  # after the stop
            Delta("yy", 4, lp("yy", -0.4)),  # after the stop
            Finished("cancelled", 5, 4),
        ],
    )
    assert contents(events) == "ab"
    tokens = [
        e["token"]
        for t, d in events
        if t == COMPLETION_CHUNK["chat"]
        for e in d["choices"][0]["logprobs"]["content"]
    ]
    assert "zz" not in tokens and "yy" not in tokens, tokens


# --- text (legacy) ---------------------------------------------------------------------


def test_text_opening_is_empty_without_echo() -> None:
    assert text().opening() == []


def test_text_echo_sends_the_prompt_first() -> None:
    rec = text(prefix="Say: ")
    [(type_, data)] = rec.opening()
    assert type_ == "text_completion.chunk"
    assert data["choices"] == [
        {"index": 0, "text": "Say: ", "logprobs": None, "finish_reason": None}
    ]
    assert data["object"] == "text_completion" and data["usage"] is None


def test_text_full_completion() -> None:
    rec = text()
    events = feed(rec, [Delta("one", 1), Delta(" two", 2), Finished("length", 3, 2)])
    assert [t for t, _ in events] == [COMPLETION_CHUNK["text"]] * 3 + [COMPLETION_USAGE["text"]]
    assert texts(events) == "one two"
    assert events[-2][1]["choices"][0] == {
        "index": 0,
        "text": "",
        "logprobs": None,
        "finish_reason": "length",
    }
    usage = events[-1][1]
    assert usage["choices"] == [] and usage["object"] == "text_completion"
    assert usage["usage"]["total_tokens"] == 5
    for _, d in events[:-1]:
        Completion.model_validate({**d, "choices": [{**d["choices"][0], "finish_reason": "stop"}]})


def test_text_stop() -> None:
    rec = text(stops=["\n"])
    events = feed(rec, [Delta("line one", 1), Delta("\nline two", 2), Finished("cancelled", 4, 2)])
    assert texts(events) == "line one"
    assert rec.finish_reason == "stop"
    assert events[-1][0] == COMPLETION_USAGE["text"]


def test_text_logprobs_with_echo_offsets() -> None:
    rec = text(prefix="Hi", logprobs=True)
    events = feed(
        rec,
        [
            Delta(" the", 1, lp(" the", -0.5, ((" the", -0.5), (" a", -1.5)))),
            Delta(" end", 2, lp(" end", -0.25)),
            Finished("length", 1, 2),
        ],
    )
    chunks = [d for t, d in events if t == COMPLETION_CHUNK["text"]]
    assert chunks[0]["choices"][0]["logprobs"] == {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    assert chunks[1]["choices"][0]["logprobs"] == {
        "tokens": [" the"],
        "token_logprobs": [-0.5],
        "top_logprobs": [{" the": -0.5, " a": -1.5}],
        "text_offset": [2],
    }
    assert chunks[2]["choices"][0]["logprobs"]["text_offset"] == [6]
    assert texts(events) == "Hi the end"


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_failed_before_any_token(kind: str) -> None:
    rec = ChunkRecorder(kind, "x", "m", CREATED)  # type: ignore[arg-type]
    events = rec.opening() + rec.on_output(Failed("no"))
    assert events[-1][0] == COMPLETION_ERROR
    assert rec.done


def test_text_top_logprobs_keep_the_best_value_when_tokens_share_a_text() -> None:
    """Legacy top_logprobs are {text: logprob} dicts: two distinct tokens may decode to the same
    text (e.g. two partial UTF-8 bytes both shown as U+FFFD). The dict must keep the most
    likely one (the top list is ranked best first), not let a worse one overwrite it."""
    rec = text(logprobs=True)
    events = feed(
        rec,
        [
            Delta("", 1, lp("\ufffd", -0.5, (("\ufffd", -0.5), ("b", -1.0), ("\ufffd", -2.0)))),
            Finished("length", 1, 1),
        ],
    )
    tops = [
        top
        for t, d in events
        if t == COMPLETION_CHUNK["text"]
        for top in d["choices"][0]["logprobs"]["top_logprobs"]
    ]
    assert tops == [{"\ufffd": -0.5, "b": -1.0}]


def test_reasoning_tokens_count_generated_tokens_only() -> None:
    """The detokenizer's last flush inside a think block is text of no new token: not a
    reasoning token (reasoning never exceeds completion tokens)."""
    from omni.protocol.thinking import ThinkSplitter

    rec = chat(thinker=ThinkSplitter("<think>", "</think>", inside=True))
    events = feed(rec, [Delta("hmm", 1), Delta(" ", None), Finished("length", 5, 1)])
    details = events[-1][1]["usage"]
    assert (details["completion_tokens"], details["completion_tokens_details"]) == (
        1,
        {"reasoning_tokens": 1},
    )


# --- function calls ----------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]
W = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
T = json.dumps({"name": "get_time", "arguments": {"timezone": "Europe/Paris"}})
HERMES = ToolFormat(
    json_tools.tool_call_start, json_tools.tool_call_end, json_tools.parse_tool_call, "json_tools"
)
HERMES_CALLS = f"Sure.\n<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{T}\n</tool_call>"
# (format, output, where each call is complete): plain JSON as a grammar forces it (tool_choice
# required), and Hermes markers after some text, as a model calls under tool_choice auto.
CALL_OUTPUTS = [
    (ToolFormat(), f"[{W}, {T}]", (len(f"[{W}"), len(f"[{W}, {T}"))),
    (HERMES, HERMES_CALLS, (HERMES_CALLS.index("</tool_call>") + 12, len(HERMES_CALLS))),
]


def test_chat_opening_may_call_a_tool_with_null_content() -> None:
    """OpenAI's role chunk carries content "" only for a text answer; where a call may come,
    a string there is an (empty) text part to the AI SDK."""
    rec = chat(splitter=CallSplitter(ToolFormat(), TOOLS))
    [(_, data)] = rec.opening()
    assert data["choices"][0]["delta"] == {"role": "assistant", "content": None}
    ChatCompletionChunk.model_validate(data)
    events = feed(chat(splitter=CallSplitter(ToolFormat(), TOOLS)), [Delta("Hi", 1)])
    assert contents(events) == "Hi"


@pytest.mark.parametrize(("fmt", "output", "complete"), CALL_OUTPUTS, ids=["plain", "hermes"])
def test_chat_calls_cut_by_the_limit_keep_the_complete_ones(
    fmt: ToolFormat, output: str, complete: tuple[int, int]
) -> None:
    """Cut at every character: no text but what came before the calls, the calls completed
    before the cut, and finish_reason length."""
    before = output[: output.find("<tool_call>")] if fmt.start else ""
    for i in range(len(output)):
        rec = chat(splitter=CallSplitter(fmt, TOOLS))
        outputs = [Delta(c, n) for n, c in enumerate(output[:i])]
        events = feed(rec, [*outputs, Finished("length", 5, i)])
        said = contents(events)
        assert said == before[:i], (i, said)
        called = [
            c["function"]["name"]
            for _, d in events
            if d["choices"]
            for c in d["choices"][0]["delta"].get("tool_calls") or []
        ]
        assert called == ["get_weather", "get_time"][: sum(i >= at for at in complete)], i
        assert rec.finish_reason == "length"
        for _, d in events:
            ChatCompletionChunk.model_validate(d)
