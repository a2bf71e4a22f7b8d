"""The server's sampling defaults (`omni serve --temp/--top-p/--max-tokens`): what a request
gets for what it leaves out, on both APIs, and what it asks for itself still wins."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.service.defaults import Defaults
from tests.api._helpers import MODEL
from tests.server import ServerThread

LONG = "go on and on" + " and on" * 640  # about 1,930 of the tiny model's tokens


@pytest.fixture(scope="module")
def capped(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    db = tmp_path_factory.mktemp("defaults") / "omni.db"
    settings = Settings(db_path=str(db), keepalive=1.0, defaults=Defaults(0.0, 0.5, max_tokens=4))
    srv = ServerThread(settings, tiny_engine).start()
    with OpenAI(base_url=f"{srv.base_url}/v1", api_key="x", max_retries=0) as client:
        yield client
    srv.stop()


def test_a_bare_response_gets_the_servers_defaults(capped: OpenAI) -> None:
    r = capped.responses.create(model=MODEL, input="hi")
    assert r.usage is not None and r.usage.output_tokens == 4
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert (r.temperature, r.top_p) == (0.0, 0.5)
    # temperature 0 by default: greedy, so the same answer twice
    assert capped.responses.create(model=MODEL, input="hi").output_text == r.output_text


def test_what_a_request_asks_wins(capped: OpenAI) -> None:
    r = capped.responses.create(
        model=MODEL, input="hi", max_output_tokens=9, temperature=1.0, top_p=1.0
    )
    assert r.usage is not None and r.usage.output_tokens == 9
    assert (r.temperature, r.top_p) == (1.0, 1.0)


def test_chat_gets_the_cap_too(capped: OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    bare = capped.chat.completions.create(model=MODEL, messages=messages)
    assert bare.usage is not None and bare.usage.completion_tokens == 4
    assert bare.choices[0].finish_reason == "length"
    asked = capped.chat.completions.create(model=MODEL, messages=messages, max_tokens=7)
    assert asked.usage is not None and asked.usage.completion_tokens == 7


def test_a_cap_past_the_context_is_clamped_to_what_it_leaves(capped: OpenAI) -> None:
    """10**12 tokens asked of a 2,048-token model: it stops where the context ends (after a
    long input, so that only a hundred or so tokens are left to generate)."""
    r = capped.responses.create(model=MODEL, input=LONG, temperature=0, max_output_tokens=10**12)
    assert r.usage is not None and r.status == "incomplete"
    assert r.usage.input_tokens + r.usage.output_tokens == 2048
    chat = capped.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": LONG}],
        temperature=0,
        max_tokens=10**12,
    )
    assert chat.usage is not None and chat.choices[0].finish_reason == "length"
    assert chat.usage.prompt_tokens + chat.usage.completion_tokens == 2048
    text = capped.completions.create(model=MODEL, prompt=LONG, temperature=0, max_tokens=10**12)
    assert text.usage is not None and text.choices[0].finish_reason == "length"
    assert text.usage.prompt_tokens + text.usage.completion_tokens == 2048
    bare = capped.completions.create(model=MODEL, prompt="go on and on", temperature=0)
    assert bare.usage is not None and bare.usage.completion_tokens == 16  # OpenAI's default
