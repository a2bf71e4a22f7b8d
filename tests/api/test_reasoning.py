"""Reasoning models, with real MLX generation: a tiny random llama whose tokenizer has <think>
and </think> tokens and whose template opens the think block (omni.testing.llama, thinking=True).
What it writes inside the block is a `reasoning` item (Responses) or `reasoning_content`
(Chat), never answer text; a thinking budget closes the block for the model; effort "minimal"
switches the template's thinking off; reasoning tokens are counted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama
from tests.server import serving

MODEL = "tiny-thinker"
EOS, THINK, END_THINK = 2, 3, 4  # ids in the tiny tokenizer
# Keep the random model from ending, or opening/closing the block, by chance: only the budget
# closes it (the budget's mask leaves </think> as the one choice, whatever its bias).
BIAS = {str(EOS): -100, str(THINK): -100, str(END_THINK): -100}
MARKERS = ("<think>", "</think>")


@pytest.fixture(scope="module")
def thinking_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLXEngine]:
    folder = build_tiny_llama(tmp_path_factory.mktemp("models") / MODEL, thinking=True)
    engine = MLXEngine(ModelSource(str(folder), MODEL))
    engine.start()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def thinker(
    thinking_engine: MLXEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenAI]:
    with serving(thinking_engine, tmp_path_factory.mktemp("db") / "omni.db") as client:
        yield client


def test_reasoning_streams_as_a_reasoning_item_before_the_message(thinker: OpenAI) -> None:
    events: list[Any] = list(
        thinker.responses.create(
            model=MODEL,
            input="Think, then answer.",
            temperature=0,
            max_output_tokens=16,
            stream=True,
            extra_body={"thinking_budget": 6, "logit_bias": BIAS},
        )
    )
    final = events[-1].response  # response.incomplete: the answer ran to max_output_tokens
    types = [e.type for e in events]
    reasoning_events = [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
    ]
    assert types[2:5] == reasoning_events
    closing = types.index("response.reasoning_text.done")
    assert types[closing : closing + 3] == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert "response.output_text.delta" in types[closing:]
    assert [o.type for o in final.output] == ["reasoning", "message"]
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.content
    text = reasoning.content[0].text
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text == deltas and text
    assert not any(m in text or m in final.output_text for m in MARKERS)
    assert final.status == "incomplete"  # the answer ran to max_output_tokens
    assert final.usage is not None
    # The budget's 6 tokens, plus the </think> that closed the block.
    assert final.usage.output_tokens_details.reasoning_tokens == 7
    again = thinker.responses.retrieve(final.id)
    assert again.output[0].model_dump() == reasoning.model_dump()


def test_effort_minimal_switches_thinking_off(thinker: OpenAI) -> None:
    response = thinker.responses.create(
        model=MODEL,
        input="Just answer.",
        temperature=0,
        max_output_tokens=8,
        reasoning={"effort": "minimal"},
        extra_body={"logit_bias": BIAS},
    )
    assert [o.type for o in response.output] == ["message"]
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_chat_reasoning_content_streamed_and_folded(thinker: OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Think, then answer."}],
        "temperature": 0,
        "max_tokens": 16,
        "extra_body": {"thinking_budget": 5, "logit_bias": BIAS},
    }
    chunks = list(
        thinker.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert reasoning and content
    assert not any(m in reasoning or m in content for m in MARKERS)
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 6

    completion = thinker.chat.completions.create(
        **body, extra_headers={"Cache-Control": "no-cache"}
    )
    message = completion.choices[0].message
    assert getattr(message, "reasoning_content", None) == reasoning
    assert message.content == content

    # reasoning_content sent back on an assistant message is accepted.
    history: Any = [
        {"role": "user", "content": "Think, then answer."},
        {"role": "assistant", "content": content, "reasoning_content": reasoning},
        {"role": "user", "content": "Again."},
    ]
    again = thinker.chat.completions.create(
        model=MODEL, messages=history, max_tokens=4, extra_body={"logit_bias": BIAS}
    )
    assert again.choices[0].finish_reason == "length"


def test_encrypted_reasoning_round_trips_across_a_restart(
    thinking_engine: MLXEngine, tmp_path: Path
) -> None:
    """Sealed with the key in OMNI_HOME: a restarted server opens it; an altered token, or one
    from a server with another key, is a 400 naming the item."""
    home = tmp_path / "home"
    body: dict[str, Any] = {
        "model": MODEL,
        "temperature": 0,
        "max_output_tokens": 12,
        "extra_body": {"thinking_budget": 4, "logit_bias": BIAS},
    }
    with serving(thinking_engine, tmp_path / "a.db", home) as client:
        first = client.responses.create(
            input="Think.", include=["reasoning.encrypted_content"], store=False, **body
        )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert reasoning.content and reasoning.content[0].text not in reasoning.encrypted_content
    assert (home / "reasoning.key").stat().st_mode & 0o777 == 0o600

    history: list[Any] = [
        {"role": "user", "content": "Think."},
        reasoning.model_dump(exclude_none=True),
        {"role": "user", "content": "And again."},
    ]
    with serving(thinking_engine, tmp_path / "b.db", home) as client:  # a restart
        again = client.responses.create(input=history, store=False, **body)
        assert again.status in ("completed", "incomplete")
        token = reasoning.encrypted_content
        tampered = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(
                input=[history[0], {**history[1], "encrypted_content": tampered}], **body
            )
        assert info.value.param == "input[1].encrypted_content"
    with serving(thinking_engine, tmp_path / "c.db", tmp_path / "other") as client:
        with pytest.raises(openai.BadRequestError):
            client.responses.create(input=history, store=False, **body)


def test_a_summary_is_streamed_when_asked(thinker: OpenAI) -> None:
    events: list[Any] = list(
        thinker.responses.create(
            model=MODEL,
            input="Think.",
            temperature=0,
            max_output_tokens=10,
            reasoning={"effort": "low", "summary": "auto"},
            stream=True,
            extra_body={"thinking_budget": 3, "logit_bias": BIAS},
        )
    )
    types = [e.type for e in events]
    summary = [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    at = types.index(summary[0])
    assert types[at : at + 4] == summary
    assert types[at + 4] == "response.output_item.done"
    item = events[-1].response.output[0]
    assert item.summary[0].text == item.content[0].text
