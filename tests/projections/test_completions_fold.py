"""fold_chat / fold_text: a completion's stored chunk events → the non-streaming object."""

from __future__ import annotations

import json
from typing import Any

from openai.types import Completion
from openai.types.chat import ChatCompletion

from omni.ports.chat import ToolFormat
from omni.ports.jobs import Delta, Failed, Finished, Logprobs, TokenLogprob
from omni.projections.completions import fold_chat, fold_text
from omni.protocol.chat_recorder import ChunkRecorder
from omni.tools.calls import CallSplitter

CREATED = 1700000000
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]


def splitter() -> CallSplitter:
    return CallSplitter(ToolFormat(), TOOLS)


def rows(kind: str, outputs: list[Any], **kwargs: Any) -> list[tuple[str, str]]:
    """(type, data) pairs as the store holds them, built by the real recorder."""
    cid = "chatcmpl-f" if kind == "chat" else "cmpl-f"
    rec = ChunkRecorder(kind, cid, "tiny-llama", CREATED, **kwargs)  # type: ignore[arg-type]
    events = rec.opening()
    for out in outputs:
        events += rec.on_output(out)
    return [(t, json.dumps(d, ensure_ascii=False, separators=(",", ":"))) for t, d in events]


def lp(token: str, logprob: float, top: tuple[tuple[str, float], ...] = ()) -> Logprobs:
    return Logprobs(
        TokenLogprob(token, tuple(token.encode()), logprob),
        tuple(TokenLogprob(t, tuple(t.encode()), v) for t, v in top),
    )


def test_fold_chat_plain() -> None:
    folded = fold_chat(rows("chat", [Delta("Hel", 1), Delta("lo", 2), Finished("stop", 9, 2, 4)]))
    assert folded == {
        "id": "chatcmpl-f",
        "object": "chat.completion",
        "created": CREATED,
        "model": "tiny-llama",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": None,
        "service_tier": "default",
    }
    ChatCompletion.model_validate(folded)


def test_fold_chat_length_and_empty_content() -> None:
    folded = fold_chat(rows("chat", [Finished("length", 3, 0)]))
    assert folded["choices"][0]["message"]["content"] == ""
    assert folded["choices"][0]["finish_reason"] == "length"
    assert folded["usage"]["completion_tokens"] == 0
    ChatCompletion.model_validate(folded)


def test_fold_chat_with_tools_says_null_unless_text_came() -> None:
    """A stream that may call a tool opens with a null content: its fold says null where no
    text followed (a call, or one cut short), and the text where some did."""
    W = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    cut = [Delta(f"[{W}, ", 1), Delta('{"name": "get_ti', 2), Finished("length", 3, 2)]
    folded = fold_chat(rows("chat", cut, splitter=splitter()))
    (choice,) = folded["choices"]
    assert choice["message"]["content"] is None
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert choice["finish_reason"] == "length"
    ChatCompletion.model_validate(folded)
    empty = rows("chat", [Finished("stop", 3, 0)], splitter=splitter())
    assert fold_chat(empty)["choices"][0]["message"]["content"] is None
    text = rows("chat", [Delta("Hi", 1), Finished("stop", 3, 1)], splitter=splitter())
    assert fold_chat(text)["choices"][0]["message"]["content"] == "Hi"


def test_fold_chat_logprobs_concatenate_in_order() -> None:
    outputs = [
        Delta("a", 1, lp("a", -0.1, (("a", -0.1), ("b", -3.0)))),
        Delta("", 2, lp("\ufffd", -0.2, (("\ufffd", -0.2), ("c", -4.0)))),
        Delta("é", 3, lp("\ufffd", -0.3, (("\ufffd", -0.3), ("d", -5.0)))),
        Finished("length", 4, 3),
    ]
    folded = fold_chat(rows("chat", outputs, logprobs=True))
    content = folded["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in content] == [-0.1, -0.2, -0.3]
    assert [len(e["top_logprobs"]) for e in content] == [2, 2, 2]
    assert folded["choices"][0]["logprobs"]["refusal"] is None
    assert folded["choices"][0]["message"]["content"] == "aé"
    ChatCompletion.model_validate(folded)


def test_fold_chat_with_stop_sequence() -> None:
    folded = fold_chat(
        rows("chat", [Delta("one\ntwo", 1), Finished("cancelled", 2, 1)], stops=["\n"])
    )
    assert folded["choices"][0]["message"]["content"] == "one"
    assert folded["choices"][0]["finish_reason"] == "stop"


def test_fold_chat_skips_error_and_cancelled_events() -> None:
    failed = fold_chat(rows("chat", [Delta("part", 1), Failed("boom")]))
    assert failed["id"] == "chatcmpl-f"
    assert failed["choices"][0]["message"]["content"] == "part"
    assert failed["choices"][0]["finish_reason"] is None
    assert failed["usage"] is None
    cancelled = fold_chat(rows("chat", [Delta("part", 1), Finished("cancelled", 2, 1)]))
    assert cancelled["choices"][0]["message"]["content"] == "part"
    assert cancelled["choices"][0]["finish_reason"] is None
    assert cancelled["usage"] is None


def test_fold_chat_of_nothing() -> None:
    folded = fold_chat([])
    assert folded["id"] is None
    assert folded["choices"][0]["message"]["content"] == ""


def test_fold_chat_equals_the_joined_stream() -> None:
    pairs = rows(
        "chat", [Delta(c, i) for i, c in enumerate("streamed!")] + [Finished("stop", 1, 9)]
    )
    chunks = [json.loads(d) for _, d in pairs]
    joined = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert fold_chat(pairs)["choices"][0]["message"]["content"] == joined == "streamed!"


def test_fold_text_plain() -> None:
    folded = fold_text(rows("text", [Delta("one", 1), Delta(" two", 2), Finished("length", 3, 2)]))
    assert folded == {
        "id": "cmpl-f",
        "object": "text_completion",
        "created": CREATED,
        "model": "tiny-llama",
        "choices": [{"index": 0, "text": "one two", "logprobs": None, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": None,
    }
    Completion.model_validate(folded)


def test_fold_text_echo_and_logprobs() -> None:
    outputs = [
        Delta(" the", 1, lp(" the", -0.5, ((" the", -0.5), (" a", -1.0)))),
        Delta(" end", 2, lp(" end", -0.25, ((" end", -0.25),))),
        Finished("stop", 1, 2),
    ]
    folded = fold_text(rows("text", outputs, prefix="Hi", logprobs=True))
    choice = folded["choices"][0]
    assert choice["text"] == "Hi the end"
    assert choice["finish_reason"] == "stop"
    assert choice["logprobs"] == {
        "tokens": [" the", " end"],
        "token_logprobs": [-0.5, -0.25],
        "top_logprobs": [{" the": -0.5, " a": -1.0}, {" end": -0.25}],
        "text_offset": [2, 6],
    }
    for token, offset in zip(
        choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"], strict=True
    ):
        assert choice["text"][offset : offset + len(token)] == token
    Completion.model_validate(folded)


def test_fold_text_with_stop_and_cancel() -> None:
    stopped = fold_text(rows("text", [Delta("a.b", 1), Finished("cancelled", 1, 1)], stops=["."]))
    assert stopped["choices"][0]["text"] == "a"
    assert stopped["choices"][0]["finish_reason"] == "stop"
    cancelled = fold_text(rows("text", [Delta("ab", 1), Finished("cancelled", 1, 1)]))
    assert cancelled["choices"][0]["text"] == "ab"
    assert cancelled["choices"][0]["finish_reason"] is None
    assert cancelled["usage"] is None
