"""previous_response_id and the output → input round trip."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.api._helpers import MODEL, assert_error

INSTRUCTIONS = "Always answer in French, in one short sentence."


def test_second_turn_lists_only_its_own_input(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="turn one", max_output_tokens=3)
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="turn two", max_output_tokens=3
    )
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).previous_response_id == first.id
    items = list(client.responses.input_items.list(second.id, order="asc"))
    assert len(items) == 1
    assert items[0].role == "user" and [p.text for p in items[0].content] == ["turn two"]
    # The first turn's listing is unchanged.
    assert len(list(client.responses.input_items.list(first.id))) == 1


def test_chaining_onto_an_unknown_id_is_400(client: OpenAI, http: httpx.Client) -> None:
    with pytest.raises(BadRequestError) as exc:
        client.responses.create(model=MODEL, previous_response_id="resp_nope", input="hi")
    assert exc.value.code == "previous_response_not_found"
    assert exc.value.param == "previous_response_id"
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "previous_response_id": "resp_nope", "input": "hi"},
    )
    assert_error(res, 400, param="previous_response_id", code="previous_response_not_found")


def test_chaining_onto_an_unknown_id_fails_before_streaming(http: httpx.Client) -> None:
    res = http.post(
        "/v1/responses",
        json={"model": MODEL, "previous_response_id": "resp_nope", "input": "hi", "stream": True},
    )
    assert_error(res, 400, param="previous_response_id", code="previous_response_not_found")


def test_previous_instructions_are_not_inherited(client: OpenAI) -> None:
    """Turn 2 by previous_response_id renders like turn 2 with the history re-sent and no
    instructions; re-sending the instructions costs more tokens."""
    first = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="hello", max_output_tokens=4
    )
    chained = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="again", max_output_tokens=1
    )
    history = [{"role": "user", "content": "hello"}, *first.output]
    resent = client.responses.create(
        model=MODEL, input=[*history, {"role": "user", "content": "again"}], max_output_tokens=1
    )
    with_instructions = client.responses.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        input=[*history, {"role": "user", "content": "again"}],
        max_output_tokens=1,
    )
    assert chained.instructions is None
    assert chained.usage.input_tokens == resent.usage.input_tokens
    assert with_instructions.usage.input_tokens > resent.usage.input_tokens


def test_new_instructions_apply_on_a_chained_turn(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL, instructions="Old rules.", input="hello", max_output_tokens=3
    )
    chained = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        instructions="New rules.",
        input="again",
        max_output_tokens=1,
    )
    resent = client.responses.create(
        model=MODEL,
        instructions="New rules.",
        input=[
            {"role": "user", "content": "hello"},
            *first.output,
            {"role": "user", "content": "again"},
        ],
        max_output_tokens=1,
    )
    assert chained.instructions == "New rules."
    assert chained.usage.input_tokens == resent.usage.input_tokens


def test_a_chain_of_three_carries_the_whole_history(client: OpenAI) -> None:
    r1 = client.responses.create(model=MODEL, input="one", max_output_tokens=3)
    r2 = client.responses.create(
        model=MODEL, previous_response_id=r1.id, input="two", max_output_tokens=3
    )
    r3 = client.responses.create(
        model=MODEL, previous_response_id=r2.id, input="three", max_output_tokens=1
    )
    resent = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "one"},
            *r1.output,
            {"role": "user", "content": "two"},
            *r2.output,
            {"role": "user", "content": "three"},
        ],
        max_output_tokens=1,
    )
    assert r3.usage.input_tokens == resent.usage.input_tokens
    assert r3.usage.input_tokens > r2.usage.input_tokens > r1.usage.input_tokens


def test_round_trip_of_output_items_as_input(client: OpenAI) -> None:
    prev = client.responses.create(model=MODEL, input="first", max_output_tokens=4)
    r = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "first"},
            *prev.output,
            {"role": "user", "content": "next"},
        ],
        max_output_tokens=2,
    )
    assert r.status in ("completed", "incomplete")
    items = list(client.responses.input_items.list(r.id, order="asc"))
    assert [i.role for i in items] == ["user", "assistant", "user"]
    assert items[1].id == prev.output[0].id
    assert items[1].content[0].text == prev.output[0].content[0].text


def test_round_trip_of_fully_dumped_output_items(client: OpenAI, http: httpx.Client) -> None:
    """Every field the server emits (including nulls and logprobs) is accepted back."""
    prev = http.post(
        "/v1/responses", json={"model": MODEL, "input": "first", "max_output_tokens": 4}
    ).json()
    dumped = client.responses.retrieve(prev["id"]).output[0].model_dump(mode="json")
    res = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [*prev["output"], dumped, {"role": "user", "content": "next"}],
            "max_output_tokens": 1,
        },
    )
    assert res.status_code == 200, res.text


def test_round_trip_of_streamed_output(client: OpenAI) -> None:
    events = list(
        client.responses.create(model=MODEL, input="stream one", stream=True, max_output_tokens=4)
    )
    final = events[-1].response
    r = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "stream one"},
            *final.output,
            {"role": "user", "content": "and"},
        ],
        max_output_tokens=1,
    )
    assert r.status in ("completed", "incomplete")
