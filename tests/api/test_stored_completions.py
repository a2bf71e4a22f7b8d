"""Stored chat completions (all but `store: false`): list (model, metadata[k]=v, after, limit,
order), retrieve, messages, metadata update and delete, with the official SDK.

The module's server (and its database) is its own, so listings here see only what this
module created."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.api._helpers import MODEL, assert_error

MESSAGES: Any = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " you"}],
    },
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "How are you?"},
]


@pytest.fixture
def loose(server) -> Iterator[OpenAI]:
    """Non-strict: the SDK types a stored message's role as Literal["assistant"]."""
    with OpenAI(base_url=f"{server.base_url}/v1", api_key="test", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def stored(server) -> dict[str, Any]:
    """Three stored completions (a, b, c in creation order), one that says nothing of `store`
    (kept too) and one not stored."""
    with OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="test",
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        made = {}
        for name, meta in (
            ("a", {"team": "red", "n": "1"}),
            ("b", {"team": "blue"}),
            ("c", {"team": "red"}),
        ):
            made[name] = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"completion {name}"}],
                max_tokens=4,
                store=True,
                metadata=meta,
            )
        made["silent"] = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "kept"}], max_tokens=2
        )
        made["stored_false"] = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "not stored"}],
            max_tokens=2,
            store=False,
        )
    return made


def metadata_of(client: OpenAI, cid: str) -> Any:
    raw = client.chat.completions.with_raw_response.retrieve(cid)
    raw.parse()  # strict validation
    return raw.http_response.json()["metadata"]


def ids(page: Any) -> list[str]:
    return [c.id for c in page]


def test_list_default_is_ascending_and_only_stored(client: OpenAI, stored: dict[str, Any]) -> None:
    page = client.chat.completions.list()
    assert ids(page.data)[:4] == [stored[k].id for k in ("a", "b", "c", "silent")]
    assert stored["stored_false"].id not in ids(page.data)
    assert page.has_more is False
    for item in page.data:
        assert item.object == "chat.completion"
        assert item.choices[0].message.role == "assistant"


def test_list_items_equal_the_created_completions(client: OpenAI, stored: dict[str, Any]) -> None:
    listed = {c.id: c for c in client.chat.completions.list(limit=100)}
    for k in "abc":
        made, item = stored[k], listed[stored[k].id]
        assert item.choices[0].message.content == made.choices[0].message.content
        assert item.choices[0].finish_reason == made.choices[0].finish_reason
        assert item.usage == made.usage
        assert item.created == made.created
        assert item.model == MODEL


def test_list_order_desc(client: OpenAI, stored: dict[str, Any]) -> None:
    page = client.chat.completions.list(order="desc")
    mine = [i for i in ids(page.data) if i in {stored[k].id for k in "abc"}]
    assert mine == [stored[k].id for k in "cba"]


def test_list_filters_by_model(client: OpenAI, stored: dict[str, Any]) -> None:
    assert {stored[k].id for k in "abc"} <= set(ids(client.chat.completions.list(model=MODEL)))
    assert ids(client.chat.completions.list(model="other-model")) == []


def test_list_filters_by_metadata(client: OpenAI, stored: dict[str, Any]) -> None:
    red = ids(client.chat.completions.list(metadata={"team": "red"}))
    assert red == [stored["a"].id, stored["c"].id]
    both = ids(client.chat.completions.list(metadata={"team": "red", "n": "1"}))
    assert both == [stored["a"].id]
    assert ids(client.chat.completions.list(metadata={"team": "green"})) == []


def test_metadata_query_raw(http: httpx.Client, stored: dict[str, Any]) -> None:
    res = http.get("/v1/chat/completions", params={"metadata[team]": "blue"})
    assert res.status_code == 200
    body = res.json()
    assert body["object"] == "list"
    assert [c["id"] for c in body["data"]] == [stored["b"].id]
    assert body["data"][0]["metadata"] == {"team": "blue"}
    assert body["first_id"] == body["last_id"] == stored["b"].id


def test_pagination_limit_1_yields_every_item_once(client: OpenAI, stored: dict[str, Any]) -> None:
    first = client.chat.completions.list(limit=1)
    assert len(first.data) == 1 and first.has_more is True
    every = ids(client.chat.completions.list(limit=1))  # auto-paginates
    assert len(every) == len(set(every))
    assert every[:3] == [stored[k].id for k in "abc"]
    assert every == ids(client.chat.completions.list(limit=100))


def test_after_cursor(client: OpenAI, stored: dict[str, Any]) -> None:
    page = client.chat.completions.list(after=stored["a"].id, limit=1)
    assert ids(page.data) == [stored["b"].id]
    page = client.chat.completions.list(after=stored["b"].id, limit=1, order="desc")
    assert ids(page.data) == [stored["a"].id]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"order": "up"}])
def test_bad_list_params(http: httpx.Client, params: dict[str, Any]) -> None:
    assert_error(http.get("/v1/chat/completions", params=params), 400)


def test_retrieve(client: OpenAI, stored: dict[str, Any]) -> None:
    made = stored["a"]
    got = client.chat.completions.retrieve(made.id)
    assert got.id == made.id
    assert got.choices[0].message.content == made.choices[0].message.content
    assert got.choices[0].finish_reason == made.choices[0].finish_reason
    assert got.usage == made.usage
    assert got.created == made.created
    assert metadata_of(client, made.id) == {"team": "red", "n": "1"}


def test_unstored_completions_are_not_found(client: OpenAI, stored: dict[str, Any]) -> None:
    cid = stored["stored_false"].id
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(cid)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.messages.list(cid)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.update(cid, metadata={"x": "y"})
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.delete(cid)


def test_unknown_id_is_404(client: OpenAI, http: httpx.Client) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve("chatcmpl-nope")
    assert_error(http.get("/v1/chat/completions/chatcmpl-nope"), 404)


def test_messages(loose: OpenAI, client: OpenAI, http: httpx.Client) -> None:
    made = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, store=True)
    page = loose.chat.completions.messages.list(made.id)
    assert [m.role for m in page.data] == ["system", "user", "assistant", "user"]
    assert [m.content for m in page.data] == ["Be brief.", "Hello you", "Hi.", "How are you?"]
    assert len({m.id for m in page.data}) == 4
    assert page.data[1].content_parts is not None
    assert [getattr(p, "text", None) for p in page.data[1].content_parts] == ["Hello", " you"]
    assert page.data[0].content_parts is None
    # Raw: the list envelope.
    body = http.get(f"/v1/chat/completions/{made.id}/messages").json()
    assert body["object"] == "list" and body["has_more"] is False
    assert body["first_id"] == body["data"][0]["id"] and body["last_id"] == body["data"][-1]["id"]
    # Pagination, both orders.
    one_by_one = [m.id for m in loose.chat.completions.messages.list(made.id, limit=1)]
    assert one_by_one == [m.id for m in page.data]
    desc = [m.id for m in loose.chat.completions.messages.list(made.id, order="desc")]
    assert desc == one_by_one[::-1]


def test_update_metadata(client: OpenAI) -> None:
    made = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "update me"}],
        max_tokens=2,
        store=True,
        metadata={"stage": "draft"},
    )
    raw = client.chat.completions.with_raw_response.update(
        made.id, metadata={"stage": "final", "who": "me"}
    )
    updated = raw.parse()  # strict validation of the returned completion
    assert updated.id == made.id
    assert raw.http_response.json()["metadata"] == {"stage": "final", "who": "me"}
    assert updated.choices[0].message.content == made.choices[0].message.content
    assert metadata_of(client, made.id) == {"stage": "final", "who": "me"}
    assert made.id in ids(client.chat.completions.list(metadata={"stage": "final"}))
    assert made.id not in ids(client.chat.completions.list(metadata={"stage": "draft"}))
    client.chat.completions.update(made.id, metadata=None)
    assert metadata_of(client, made.id) == {}


def test_update_with_bad_metadata_is_400(http: httpx.Client, client: OpenAI) -> None:
    made = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1, store=True
    )
    res = http.post(f"/v1/chat/completions/{made.id}", json={"metadata": {"k": 1}})
    assert_error(res, 400, param="metadata")
    res = http.post(f"/v1/chat/completions/{made.id}", json={"metadata": "nope"})
    assert_error(res, 400, param="metadata")


def test_delete(client: OpenAI) -> None:
    made = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "delete me"}],
        max_tokens=2,
        store=True,
        metadata={"doomed": "yes"},
    )
    assert made.id in ids(client.chat.completions.list(metadata={"doomed": "yes"}))
    deleted = client.chat.completions.delete(made.id)
    assert deleted.id == made.id and deleted.deleted is True
    assert deleted.object == "chat.completion.deleted"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(made.id)
    assert made.id not in ids(client.chat.completions.list(limit=100))
    assert ids(client.chat.completions.list(metadata={"doomed": "yes"})) == []
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.update(made.id, metadata={"a": "b"})
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.messages.list(made.id)


def test_streamed_store_is_retrievable(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "stream and store"}],
            max_tokens=6,
            store=True,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    cid = chunks[0].id
    got = client.chat.completions.retrieve(cid)
    assert got.choices[0].message.content == "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices
    )
    assert got.usage == chunks[-1].usage


def test_cache_hit_with_store_is_its_own_stored_completion(client: OpenAI) -> None:
    """A hit is a completion of its own: stored if its request says so, else not."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "cached and stored"}],
        "max_tokens": 5,
        "temperature": 0,
        "store": True,
    }
    first = client.chat.completions.with_raw_response.create(**body)
    second = client.chat.completions.with_raw_response.create(**body, metadata={"copy": "yes"})
    unstored = client.chat.completions.with_raw_response.create(**{**body, "store": False})
    assert [second.headers["x-omni-cache"], unstored.headers["x-omni-cache"]] == ["hit", "hit"]
    a, b, c = first.parse(), second.parse(), unstored.parse()
    assert len({a.id, b.id, c.id}) == 3
    with pytest.raises(openai.NotFoundError):  # the unstored copy is not kept
        client.chat.completions.retrieve(c.id)
    assert c.choices[0].message.content == a.choices[0].message.content
    got = client.chat.completions.retrieve(b.id)
    assert got.choices[0].message.content == a.choices[0].message.content
    assert ids(client.chat.completions.list(metadata={"copy": "yes"})) == [b.id]
