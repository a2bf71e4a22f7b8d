"""Prefix (KV) cache reuse, visible as usage.input_tokens_details.cached_tokens (Responses)
and usage.prompt_tokens_details.cached_tokens (Chat): a conversation's next turn reuses the
previous turn's prompt and answer, whether chained by previous_response_id or resent in full
(Codex style, store false); prompt_cache_key namespaces never share; a cache hit does not
change what is generated.

The tiny model's greedy text is noise and often holds lone bytes of multi-byte characters,
which do not survive decoding and re-encoding; turns whose answer must be reused exactly are
generated with those tokens biased away (logit_bias), so the answer's text re-encodes to the
very tokens that were generated.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.api._helpers import MODEL

NO_CACHE = {"cache-control": "no-cache"}
# Checked to re-encode token for token with the bias below (a deterministic tiny model).
PROMPT = "Tell me about the quick brown fox please"


def key(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def clean_text_bias(tiny_model_dir: Path) -> dict[str, float]:
    """logit_bias that keeps the tiny model to tokens that decode to whole characters."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    size = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
    bad = [
        i
        for i in range(size)
        if i >= tok.get_vocab_size()
        or i in (0, 1)
        or "\ufffd" in tok.decode([i])
        or not tok.decode([i])
    ]
    assert 0 < len(bad) < size // 2
    return {str(i): -100 for i in bad}


def cached(r: Any) -> int:
    return int(r.usage.input_tokens_details.cached_tokens)


def turn_one(client: OpenAI, bias: dict[str, float], cache_key: str, **body: Any) -> Any:
    r = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_output_tokens=40,
        prompt_cache_key=cache_key,
        extra_body={"logit_bias": bias},
        **body,
    )
    assert r.status == "incomplete" and r.usage.output_tokens == 40
    assert "\ufffd" not in r.output_text
    return r


def test_previous_response_id_chain_reuses_prompt_and_answer(
    client: OpenAI, clean_text_bias: dict[str, float]
) -> None:
    k = key("chain")
    first = turn_one(client, clean_text_bias, k)
    assert cached(first) == 0  # a fresh namespace
    second = client.responses.create(
        model=MODEL,
        input="And then what happened?",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=10,
        prompt_cache_key=k,
    )
    reused = first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens > reused
    assert reused - 3 <= cached(second) < second.usage.input_tokens

    third = client.responses.create(
        model=MODEL,
        input="And after that?",
        previous_response_id=second.id,
        temperature=0,
        max_output_tokens=5,
        prompt_cache_key=k,
    )
    assert cached(third) >= second.usage.input_tokens - 3


def test_chain_reuses_at_least_the_previous_prompt_whatever_the_answer(client: OpenAI) -> None:
    """Without the bias the answer may not re-encode as generated; the prompt still counts."""
    k = key("chain-noisy")
    first = client.responses.create(
        model=MODEL, input=PROMPT, temperature=0, max_output_tokens=30, prompt_cache_key=k
    )
    second = client.responses.create(
        model=MODEL,
        input="More.",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=5,
        prompt_cache_key=k,
    )
    assert first.usage.input_tokens - 1 <= cached(second) < second.usage.input_tokens


def test_codex_style_full_resend_reuses_the_cache(
    client: OpenAI, clean_text_bias: dict[str, float]
) -> None:
    k = key("codex")
    first = turn_one(client, clean_text_bias, k, store=False)
    history: list[Any] = [{"role": "user", "content": PROMPT}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    second = client.responses.create(
        model=MODEL,
        input=[*history, {"role": "user", "content": "And then what happened?"}],
        store=False,
        temperature=0,
        max_output_tokens=10,
        prompt_cache_key=k,
    )
    assert cached(second) >= first.usage.input_tokens + first.usage.output_tokens - 3
    assert cached(second) < second.usage.input_tokens

    # The same history under another key: nothing shared.
    other = client.responses.create(
        model=MODEL,
        input=[*history, {"role": "user", "content": "And then what happened?"}],
        store=False,
        temperature=0,
        max_output_tokens=10,
        prompt_cache_key=key("codex-other"),
    )
    assert cached(other) == 0
    assert other.output_text == second.output_text  # a hit does not change the answer


def test_prompt_cache_keys_are_separate_namespaces(client: OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "prefix cache: the very same prompt under several keys",
        "temperature": 0,
        "max_output_tokens": 20,
    }
    a, b = key("ns-a"), key("ns-b")
    first = client.responses.create(**body, prompt_cache_key=a)
    assert cached(first) == 0
    again = client.responses.create(**body, prompt_cache_key=a)
    # All of the prompt but the last token (the model must see one to predict the next).
    assert again.usage.input_tokens - 2 <= cached(again) < again.usage.input_tokens
    elsewhere = client.responses.create(**body, prompt_cache_key=b)
    assert cached(elsewhere) == 0
    assert first.output_text == again.output_text == elsewhere.output_text


def test_chat_reports_cached_prompt_tokens(
    client: OpenAI, clean_text_bias: dict[str, float]
) -> None:
    # PROMPT (fixed): its answer re-encodes as generated. Chat has no prompt_cache_key: this
    # is the shared namespace, where no other test sends this prompt.
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    first = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=40,
        logit_bias=clean_text_bias,  # type: ignore[arg-type]
        extra_headers=NO_CACHE,
    )
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    # New text: at most the chat template's opening is shared with earlier prompts.
    assert (first.usage.prompt_tokens_details.cached_tokens or 0) < 10
    again = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=40,
        logit_bias=clean_text_bias,  # type: ignore[arg-type]
        extra_headers=NO_CACHE,
    )
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    hit = again.usage.prompt_tokens_details.cached_tokens or 0
    assert again.usage.prompt_tokens - 2 <= hit < again.usage.prompt_tokens
    assert again.choices[0].message.content == first.choices[0].message.content

    answer = first.choices[0].message.content or ""
    assert "\ufffd" not in answer
    follow = client.chat.completions.create(
        model=MODEL,
        messages=[
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "And?"},
        ],
        temperature=0,
        max_tokens=5,
        extra_headers=NO_CACHE,
    )
    assert follow.usage is not None and follow.usage.prompt_tokens_details is not None
    reused = first.usage.prompt_tokens + first.usage.completion_tokens
    assert follow.usage.prompt_tokens_details.cached_tokens >= reused - 3


@pytest.mark.parametrize(
    "penalty",
    [{"repetition_penalty": 2.0}, {"presence_penalty": 2.0}, {"frequency_penalty": 2.0}],
    ids=["repetition", "presence", "frequency"],
)
def test_a_cache_hit_does_not_change_a_penalized_greedy_answer(
    client: OpenAI, penalty: dict[str, float]
) -> None:
    """Penalties look at the last tokens, the prompt's included: whether the prompt's KV came
    from the cache must not change which tokens they see."""
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "Hello Hello Hello Hello Hello",
        "temperature": 0,
        "max_output_tokens": 30,
        "extra_body": penalty,
    }
    k = key("penalty")
    cold = client.responses.create(**body, prompt_cache_key=k)
    warm = client.responses.create(**body, prompt_cache_key=k)
    other_cold = client.responses.create(**body, prompt_cache_key=key("penalty-other"))
    assert cached(cold) == 0 and cached(warm) > 0 and cached(other_cold) == 0
    assert other_cold.output_text == cold.output_text  # greedy is deterministic
    assert warm.output_text == cold.output_text


def test_messages_report_the_prefix_cache_as_cache_read_tokens(
    server: Any, clean_text_bias: dict[str, float]
) -> None:
    """Claude Code resends the whole conversation every turn, with cache_control marks: the
    next turn reads the previous turn's prompt from the prefix cache, and usage says so
    (input_tokens are the rest)."""
    import anthropic

    sdk = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    system = [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]
    said: list[Any] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}],
        }
    ]
    sampling = {"temperature": 0, "logit_bias": clean_text_bias}
    first = sdk.messages.create(
        model=MODEL, max_tokens=40, system=system, messages=said, extra_body=sampling,
        extra_headers=NO_CACHE,
    )  # fmt: skip
    assert first.usage.cache_read_input_tokens is not None
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    # At most what other tests' prompts share with it (the template's opening, the system).
    assert first.usage.cache_read_input_tokens < prompt // 2
    answer = "".join(b.text for b in first.content if b.type == "text")
    assert "\ufffd" not in answer
    follow = sdk.messages.create(
        model=MODEL,
        max_tokens=5,
        system=system,
        messages=[
            *said,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "And?"},
        ],
        extra_body={"temperature": 0},
        extra_headers=NO_CACHE,
    )
    read = follow.usage.cache_read_input_tokens or 0
    # The whole first prompt at least (its answer too where its text re-encodes to the very
    # tokens generated, as the chat test above shows; this one's may hold control bytes).
    assert read >= prompt
    assert follow.usage.input_tokens + read > read  # the new turn's own tokens are prefilled
    assert follow.usage.cache_creation_input_tokens == 0
