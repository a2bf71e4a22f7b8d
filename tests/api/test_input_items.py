"""GET /v1/responses/{id}/input_items: ids, order, limits, cursor pagination, shapes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.api._helpers import MODEL, assert_error


@pytest.fixture(scope="module")
def created(server) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A response whose input mixes every supported item kind (23 items in all)."""
    from openai import OpenAI

    with OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="t",
        max_retries=0,
        _strict_response_validation=True,
    ) as c:
        prev = c.responses.create(model=MODEL, input="earlier turn", max_output_tokens=3)
        prev_message = prev.output[0]
        items: list[Any] = [
            {"role": "system", "content": "System rules."},
            {"role": "developer", "content": "Developer rules."},
            {"role": "user", "content": "An easy user message."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Typed part one."},
                    {"type": "input_text", "text": "Typed part two."},
                ],
            },
            {
                "type": "message",
                "id": "msg_given_by_client",
                "role": "user",
                "content": [{"type": "input_text", "text": "A message with an id."}],
            },
            {
                "type": "function_call",
                "id": "fc_given_by_client",
                "call_id": "call_weather_1",
                "name": "get_weather",
                "arguments": json.dumps({"city": "Paris"}),
            },
            {
                "type": "function_call_output",
                "call_id": "call_weather_1",
                "output": json.dumps({"temperature": 21}),
            },
            prev_message,  # the SDK serialises it back with every field
            {"role": "assistant", "content": "An easy assistant message."},
        ]
        items += [{"role": "user", "content": f"filler {i}"} for i in range(14)]
        r = c.responses.create(model=MODEL, input=items, max_output_tokens=2)
        return {"id": r.id, "prev_message": prev_message, "n": len(items)}


def _all(client: OpenAI, rid: str, **kw: Any) -> list[Any]:
    return list(client.responses.input_items.list(rid, **kw))


def test_every_item_has_an_id_and_given_ids_are_kept(created, client: OpenAI) -> None:  # type: ignore[no-untyped-def]
    items = _all(client, created["id"], order="asc", limit=100)
    assert len(items) == created["n"] == 23
    ids = [i.id for i in items]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids[4] == "msg_given_by_client"
    assert ids[5] == "fc_given_by_client"
    assert ids[7] == created["prev_message"].id


def test_items_keep_their_kind_and_content_in_asc_order(created, client: OpenAI) -> None:  # type: ignore[no-untyped-def]
    items = _all(client, created["id"], order="asc", limit=100)
    kinds = [(i.type, getattr(i, "role", None)) for i in items]
    assert kinds[:9] == [
        ("message", "system"),
        ("message", "developer"),
        ("message", "user"),
        ("message", "user"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "assistant"),
    ]
    assert [p.text for p in items[0].content] == ["System rules."]
    assert items[0].content[0].type == "input_text"
    assert [p.text for p in items[3].content] == ["Typed part one.", "Typed part two."]
    call = items[5]
    assert (call.call_id, call.name, json.loads(call.arguments)) == (
        "call_weather_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert call.status in ("completed", "in_progress", "incomplete")
    out = items[6]
    assert out.call_id == "call_weather_1" and json.loads(out.output) == {"temperature": 21}
    assert out.id and out.status
    prev = created["prev_message"]
    replayed = items[7]
    assert replayed.content[0].type == "output_text"
    assert replayed.content[0].text == prev.content[0].text
    assert replayed.content[0].annotations == []
    assert items[8].content[0].type == "output_text"
    assert items[8].content[0].text == "An easy assistant message."
    assert [i.content[0].text for i in items[9:]] == [f"filler {i}" for i in range(14)]


def test_default_order_is_desc_and_default_limit_is_20(
    created, client: OpenAI, http: httpx.Client
) -> None:  # type: ignore[no-untyped-def]
    asc = [i.id for i in _all(client, created["id"], order="asc", limit=100)]
    page = client.responses.input_items.list(created["id"])
    assert [i.id for i in page.data] == list(reversed(asc))[:20]
    assert page.has_more is True
    assert page.first_id == asc[-1]
    assert page.last_id == list(reversed(asc))[19]
    raw = http.get(f"/v1/responses/{created['id']}/input_items").json()
    assert set(raw) == {"object", "data", "first_id", "last_id", "has_more"}
    assert raw["object"] == "list" and len(raw["data"]) == 20 and raw["has_more"] is True


def test_asc_page(created, client: OpenAI) -> None:  # type: ignore[no-untyped-def]
    asc = [i.id for i in _all(client, created["id"], order="asc", limit=100)]
    page = client.responses.input_items.list(created["id"], order="asc", limit=5)
    assert [i.id for i in page.data] == asc[:5]
    assert page.first_id == asc[0] and page.last_id == asc[4] and page.has_more is True
    last = client.responses.input_items.list(created["id"], order="asc", after=asc[-3], limit=5)
    assert [i.id for i in last.data] == asc[-2:]
    assert last.has_more is False


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_auto_pagination_returns_every_item_once(created, client: OpenAI, order: str) -> None:  # type: ignore[no-untyped-def]
    full = [i.id for i in _all(client, created["id"], order=order, limit=100)]
    paged = [i.id for i in client.responses.input_items.list(created["id"], limit=2, order=order)]
    assert paged == full
    assert len(paged) == 23


def test_exact_page_boundary_has_more_false(client: OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
        max_output_tokens=1,
    )
    page = client.responses.input_items.list(r.id, limit=2, order="asc")
    assert len(page.data) == 2 and page.has_more is False
    assert [i.id for i in client.responses.input_items.list(r.id, limit=1, order="asc")] == [
        i.id for i in page.data
    ]


def test_string_input_is_one_user_message(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="just a string", max_output_tokens=1)
    page = client.responses.input_items.list(r.id)
    assert len(page.data) == 1 and page.has_more is False
    item = page.data[0]
    assert item.type == "message" and item.role == "user" and item.id
    assert [p.text for p in item.content] == ["just a string"]
    assert page.first_id == page.last_id == item.id


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc"])
def test_limit_out_of_range_is_400(created, http: httpx.Client, limit: str) -> None:  # type: ignore[no-untyped-def]
    res = http.get(f"/v1/responses/{created['id']}/input_items", params={"limit": limit})
    assert_error(res, 400, param="limit")


@pytest.mark.parametrize("limit", ["1", "100"])
def test_limit_bounds_are_accepted(created, http: httpx.Client, limit: str) -> None:  # type: ignore[no-untyped-def]
    res = http.get(f"/v1/responses/{created['id']}/input_items", params={"limit": limit})
    assert res.status_code == 200
    assert len(res.json()["data"]) == min(int(limit), 23)


def test_bogus_order_is_400(created, http: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    res = http.get(f"/v1/responses/{created['id']}/input_items", params={"order": "bogus"})
    assert_error(res, 400, param="order")


def test_include_query_is_accepted(created, client: OpenAI) -> None:  # type: ignore[no-untyped-def]
    page = client.responses.input_items.list(
        created["id"], include=["message.output_text.logprobs"], limit=3
    )
    assert len(page.data) == 3


def test_unknown_response_is_404(http: httpx.Client) -> None:
    res = http.get("/v1/responses/resp_does_not_exist/input_items")
    assert_error(res, 404)
