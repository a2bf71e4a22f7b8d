"""`item_reference` input items: an earlier stored response's input or output item, named by
its id, stands for the item itself (in the prompt, in input_items), as the Vercel AI SDK's
Responses provider sends its earlier turns; an id the caller cannot see is a 400."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.api._helpers import GREEDY, MODEL, assert_error, high_water, parse_frames, read_log

QUESTION = "and then what happened?"


def first_turn(client: OpenAI, **extra: Any) -> tuple[Any, Any]:
    """A finished first turn and its one input item (the user's message)."""
    r1 = client.responses.create(model=MODEL, max_output_tokens=4, **GREEDY, **extra)
    assert r1.output and r1.output[0].type == "message"
    if not extra.get("store", True):
        return r1, None
    (asked,) = client.responses.input_items.list(r1.id).data
    return r1, asked


def texts(items: list[Any]) -> list[tuple[str, str, str]]:
    """(id, role, text) of message items."""
    return [(i.id, i.role, "".join(p.text for p in i.content)) for i in items]


def test_a_second_turn_of_references_is_the_second_turn_of_items(client: OpenAI) -> None:
    r1, asked = first_turn(client)
    answer = r1.output[0]
    refs = client.responses.create(
        model=MODEL,
        input=[
            {"type": "item_reference", "id": asked.id},
            {"id": answer.id},  # the type is optional in OpenAI's schema
            {"role": "user", "content": QUESTION},
        ],
        max_output_tokens=2,
    )
    inline = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": GREEDY["input"]},
            answer.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "user", "content": QUESTION},
        ],
        max_output_tokens=2,
    )
    alone = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2)
    # The referenced items are in the prompt, exactly as if they had been sent.
    assert refs.usage is not None and inline.usage is not None and alone.usage is not None
    assert refs.usage.input_tokens == inline.usage.input_tokens > alone.usage.input_tokens
    # input_items lists the items themselves, under their own ids, in order.
    listed = client.responses.input_items.list(refs.id, order="asc").data
    assert [i.type for i in listed] == ["message"] * 3
    assert texts(listed)[:2] == [
        (asked.id, "user", GREEDY["input"]),
        (answer.id, "assistant", answer.content[0].text),  # type: ignore[union-attr]
    ]
    assert texts(listed)[2][1:] == ("user", QUESTION)
    # A third turn may reference items the second one copied (and its own output).
    third = client.responses.create(
        model=MODEL,
        input=[{"type": "item_reference", "id": i.id} for i in listed]
        + [{"type": "item_reference", "id": refs.output[0].id}],
        max_output_tokens=2,
    )
    assert [i.id for i in client.responses.input_items.list(third.id, order="asc").data] == [
        *[i.id for i in listed],
        refs.output[0].id,
    ]


def test_a_vercel_ai_sdk_second_turn_streams(client: OpenAI, http: httpx.Client) -> None:
    """The body @ai-sdk/openai's Responses provider sends on a second turn (store left at its
    default, true): user turns inline as input_text parts, the assistant's turn as a bare
    item_reference to its message's id; then it reads the stream."""
    r1, _ = first_turn(client)
    body = {
        "model": MODEL,
        "input": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "input_text", "text": GREEDY["input"]}]},
            {"type": "item_reference", "id": r1.output[0].id},
            {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        ],
        "max_output_tokens": 2,
        "stream": True,
    }
    res = http.post("/v1/responses", json=body)
    assert res.status_code == 200, res.text[:500]
    frames = parse_frames(res.content)
    assert frames[0].event == "response.created"
    assert frames[-1].event in ("response.completed", "response.incomplete")
    rid = frames[0].data["response"]["id"]
    listed = client.responses.input_items.list(rid, order="asc").data
    assert [getattr(i, "role", None) for i in listed] == ["system", "user", "assistant", "user"]
    assert listed[2].id == r1.output[0].id


# Every id the caller cannot see, and another owner's: tests/service/test_item_reference.py;
# here the error body of one unknown id, and the schema's refusal of an empty one.
@pytest.mark.parametrize("unknown", ["msg_0000", ""])
def test_a_reference_the_caller_cannot_see_is_400_naming_it(
    client: OpenAI, http: httpx.Client, server: Any, unknown: str
) -> None:
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1, store=True
    ).id
    unstored = first_turn(client, store=False)[0].output[0].id
    deleted = first_turn(client)[0]
    client.responses.delete(deleted.id)
    ref = unknown.format(chat=chat, unstored=unstored, deleted=deleted.output[0].id)
    before = high_water(server)
    res = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": ref}],
        },
    )
    error = assert_error(res, 400, param="input[1]" if ref else "input[1].id")
    if ref:
        assert error["message"] == f"Item with id '{ref}' not found."
    assert high_water(server) == before  # nothing was written
    with pytest.raises(BadRequestError):
        client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": ref}])


def test_a_deleted_original_resolves_through_a_copy(client: OpenAI, server: Any) -> None:
    """An item copied into a later response's input is still there when the response that
    made it is deleted: the reference resolves to the copy."""
    r1, _ = first_turn(client)
    answer = r1.output[0]
    r2 = client.responses.create(
        model=MODEL, input=[{"type": "item_reference", "id": answer.id}], max_output_tokens=1
    )
    client.responses.delete(r1.id)
    r3 = client.responses.create(
        model=MODEL, input=[{"type": "item_reference", "id": answer.id}], max_output_tokens=1
    )
    assert client.responses.input_items.list(r3.id).data[0].id == answer.id
    # What the log holds for the new response is the item, not the reference.
    accepted = json.loads(read_log(server, f"{r3.id}/request")[0].data)
    assert accepted["input"][0]["type"] == "message"
    assert accepted["input"][0]["id"] == answer.id
    client.responses.delete(r2.id)
    client.responses.delete(r3.id)  # no copy is left
    with pytest.raises(BadRequestError):
        client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": answer.id}])
