"""Limits (issue "A fast engine"): a full queue answers 429 rate_limit_exceeded with
retry-after (Responses and Chat, raw and through the SDK); a prompt longer than the
context answers 400 context_length_exceeded on both APIs, unless Responses' truncation
"auto" may drop the oldest items to make it fit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI, RateLimitError

from omni.api.app import Settings
from omni.runtime.chat.engine import MLXEngine
from tests.api._helpers import MODEL, assert_error, wait_for
from tests.server import ServerThread

CONTEXT = 2048  # the tiny llama's max_position_embeddings
SENTENCE = "The quick brown fox jumps over the lazy dog. "


# --- 429 on a full queue ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_queue_server(
    tiny_engine: MLXEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    """A server that lets one request wait for the engine (each test leaves none waiting)."""
    db_path = tmp_path_factory.mktemp("small-queue") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db_path), max_queued=1), tiny_engine)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def small_queue(small_queue_server: ServerThread, tiny_engine: MLXEngine) -> Iterator[ServerThread]:
    """That server, its engine decoding one at a time."""
    before, tiny_engine.max_batch = tiny_engine.max_batch, 1
    try:
        yield small_queue_server
    finally:
        tiny_engine.max_batch = before


def test_a_full_queue_answers_429(small_queue: ServerThread, tiny_engine: MLXEngine) -> None:
    base = small_queue.base_url
    sdk = OpenAI(base_url=f"{base}/v1", api_key="test", max_retries=0)
    raw = httpx.Client(base_url=base, timeout=10, headers={"authorization": "Bearer test"})
    long = {"model": MODEL, "temperature": 0, "max_output_tokens": 4000, "background": True}
    ids: list[str] = []
    try:
        decoding = sdk.responses.create(input="limits: the one decoding", **long)
        ids.append(decoding.id)
        assert wait_for(lambda: sdk.responses.retrieve(decoding.id).status == "in_progress")
        assert wait_for(lambda: tiny_engine.queued == 0)
        waiting = sdk.responses.create(input="limits: the one waiting", **long)
        ids.append(waiting.id)
        assert wait_for(lambda: tiny_engine.queued == 1)
        assert sdk.responses.retrieve(waiting.id).status == "queued"

        refused = raw.post("/v1/responses", json={"model": MODEL, "input": "limits: a third"})
        error = assert_error(refused, 429, code="rate_limit_exceeded", type_="rate_limit_error")
        assert "limit 1" in error["message"]
        assert refused.headers["retry-after"] == "1"

        chat = raw.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "limits: chat"}]},
        )
        assert_error(chat, 429, code="rate_limit_exceeded", type_="rate_limit_error")
        assert chat.headers["retry-after"] == "1"

        legacy = raw.post("/v1/completions", json={"model": MODEL, "prompt": "limits"})
        assert_error(legacy, 429, code="rate_limit_exceeded", type_="rate_limit_error")

        with pytest.raises(RateLimitError) as info:
            sdk.responses.create(model=MODEL, input="limits: through the SDK")
        assert info.value.status_code == 429
        assert info.value.code == "rate_limit_exceeded"
        assert info.value.type == "rate_limit_error"
        assert info.value.response.headers["retry-after"] == "1"
        with pytest.raises(RateLimitError):
            sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "limits: SDK chat"}]
            )

        # Nothing refused was recorded, and the two accepted ones carry on.
        assert sdk.responses.retrieve(decoding.id).status == "in_progress"
        assert sdk.responses.retrieve(waiting.id).status == "queued"
    finally:
        statuses = [sdk.responses.cancel(rid).status for rid in reversed(ids)]
        sdk.close()
        raw.close()
    assert statuses == ["cancelled"] * len(ids)
    assert wait_for(lambda: tiny_engine.queued == 0)


def test_a_cancelled_queued_request_frees_its_place(
    small_queue: ServerThread, tiny_engine: MLXEngine
) -> None:
    """Cancelling the request that waits makes room at once: the next one is accepted
    while the first is still decoding."""
    sdk = OpenAI(base_url=f"{small_queue.base_url}/v1", api_key="test", max_retries=0)
    long = {"model": MODEL, "temperature": 0, "max_output_tokens": 4000, "background": True}
    ids: list[str] = []
    try:
        first = sdk.responses.create(input="limits: decode", **long)
        ids.append(first.id)
        assert wait_for(lambda: sdk.responses.retrieve(first.id).status == "in_progress")
        second = sdk.responses.create(input="limits: wait", **long)
        ids.append(second.id)
        assert wait_for(lambda: tiny_engine.queued == 1)
        with pytest.raises(RateLimitError):
            sdk.responses.create(model=MODEL, input="limits: refused")
        assert sdk.responses.cancel(second.id).status == "cancelled"
        assert sdk.responses.retrieve(first.id).status == "in_progress"
        assert wait_for(lambda: tiny_engine.queued == 0, timeout=2), (
            f"a cancelled request still counts as waiting ({tiny_engine.queued} queued)"
        )
        third = sdk.responses.create(input="limits: room again", **long)  # not a 429
        ids.append(third.id)
        assert third.status == "queued"
    finally:
        for rid in reversed(ids):
            sdk.responses.cancel(rid)
        sdk.close()
    assert wait_for(lambda: tiny_engine.queued == 0)


# --- 400 on an over-long prompt ----------------------------------------------------------------


def tokens(server: ServerThread, text: str) -> int:
    return len(server.state.engine.encode(text))


def text_of(server: ServerThread, at_least: int) -> str:
    """Plain text of at least `at_least` tokens."""
    per = tokens(server, SENTENCE * 10) / 10
    text = SENTENCE * int(at_least / per)
    while tokens(server, text) < at_least:
        text += SENTENCE * 5
    return text


def test_an_over_long_chat_is_refused(client: OpenAI, server: ServerThread) -> None:
    long = text_of(server, CONTEXT + 10)
    r = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": long}], "max_tokens": 5},
        timeout=10,
    )
    error = assert_error(r, 400, code="context_length_exceeded", param="messages")
    assert str(CONTEXT) in error["message"]
    with pytest.raises(BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": long}], max_tokens=5
        )
    assert info.value.code == "context_length_exceeded"
    # A legacy completion too.
    legacy = httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": MODEL, "prompt": long, "max_tokens": 5},
        timeout=10,
    )
    assert_error(legacy, 400, code="context_length_exceeded")


@pytest.mark.parametrize("truncation", [None, "disabled"])
def test_an_over_long_response_is_refused(
    client: OpenAI, server: ServerThread, truncation: str | None
) -> None:
    long = text_of(server, CONTEXT + 10)
    extra: dict[str, Any] = {} if truncation is None else {"truncation": truncation}
    r = httpx.post(
        f"{server.base_url}/v1/responses",
        json={"model": MODEL, "input": long, "max_output_tokens": 5, **extra},
        timeout=10,
    )
    error = assert_error(r, 400, code="context_length_exceeded", param="input")
    assert str(CONTEXT) in error["message"]
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input=long, max_output_tokens=5, **extra)
    assert info.value.code == "context_length_exceeded"


def test_a_prompt_just_under_the_context_is_accepted(client: OpenAI, server: ServerThread) -> None:
    per = tokens(server, SENTENCE * 10) / 10
    text = SENTENCE * int((CONTEXT - 100) / per)
    r = client.responses.create(model=MODEL, input=text, max_output_tokens=3, temperature=0)
    assert r.usage is not None and CONTEXT - 200 < r.usage.input_tokens < CONTEXT
    assert r.status == "incomplete"


def test_truncation_auto_drops_the_oldest_items(client: OpenAI, server: ServerThread) -> None:
    chunk = text_of(server, 600)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": f"oldest {chunk}"},
        {"role": "assistant", "content": f"older {chunk}"},
        {"role": "user", "content": f"recent {chunk}"},
        {"role": "assistant", "content": f"more recent {chunk}"},
        {"role": "user", "content": "limits: the newest, short question"},
    ]
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input=items, max_output_tokens=3)
    assert info.value.code == "context_length_exceeded"

    r = client.responses.create(
        model=MODEL, input=items, truncation="auto", max_output_tokens=3, temperature=0
    )
    assert r.status in ("completed", "incomplete")
    assert r.truncation == "auto"
    assert r.usage is not None
    assert r.usage.input_tokens < CONTEXT
    # Only as many of the oldest items as needed went: three of the four long ones stayed.
    assert r.usage.input_tokens > 3 * 600
    # The stored input is the request's, whole.
    stored = client.responses.input_items.list(r.id, order="asc")
    assert len(stored.data) == len(items)


def test_truncation_auto_cannot_shorten_one_over_long_item(
    client: OpenAI, server: ServerThread
) -> None:
    long = text_of(server, CONTEXT + 10)
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model=MODEL, input=long, truncation="auto", max_output_tokens=3)
    assert info.value.code == "context_length_exceeded"


def test_truncation_auto_drops_the_oldest_turns_of_a_chain(
    client: OpenAI, server: ServerThread
) -> None:
    chunk = text_of(server, 700)
    first = client.responses.create(
        model=MODEL, input=f"limits: first turn {chunk}", max_output_tokens=5, temperature=0
    )
    second = client.responses.create(
        model=MODEL,
        input=f"limits: second turn {chunk}",
        previous_response_id=first.id,
        max_output_tokens=5,
        temperature=0,
    )
    third_body: dict[str, Any] = {
        "model": MODEL,
        "input": f"limits: third turn {chunk}",
        "previous_response_id": second.id,
        "max_output_tokens": 5,
        "temperature": 0,
    }
    with pytest.raises(BadRequestError) as info:
        client.responses.create(**third_body)
    assert info.value.code == "context_length_exceeded"
    third = client.responses.create(**third_body, truncation="auto")
    assert third.usage is not None
    assert 2 * 700 < third.usage.input_tokens < CONTEXT
