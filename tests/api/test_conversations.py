"""The Conversations API and responses.input_tokens through the official OpenAI Python SDK with
strict types (every conversations call, responses.create(conversation=...), the count), what
HTTP shows of their errors, and a conversation's next turn read from the prefix cache."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from omni.api.app import Settings
from omni.api.gate import Access
from omni.api.keys import KeyRing, api_key
from tests.api._helpers import MODEL
from tests.api.test_prefix_cache import PROMPT, cached
from tests.api.test_prefix_cache import clean_text_bias as clean_text_bias  # the fixture
from tests.server import ServerThread

TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def user(text: str) -> Any:
    return {"type": "message", "role": "user", "content": text}


def test_the_count_is_the_input_a_create_uses(client: OpenAI) -> None:
    """input_tokens.count with the create's body (instructions, tools, a chain, a
    conversation) says the create's usage.input_tokens; nothing is generated for it."""
    bodies: list[dict[str, Any]] = [
        {"input": "Tell me about foxes."},
        {"input": "Tell me about foxes.", "instructions": "Answer in one word."},
        {"input": "Weather in Paris?", "tools": TOOLS},
    ]
    made = []
    for body in bodies:
        counted = client.responses.input_tokens.count(model=MODEL, **body)
        assert counted.object == "response.input_tokens"
        made.append(client.responses.create(model=MODEL, max_output_tokens=2, **body))
        assert made[-1].usage is not None
        assert counted.input_tokens == made[-1].usage.input_tokens
    assert len({m.usage.input_tokens for m in made if m.usage}) == len(bodies)
    first = made[0]
    assert first.usage is not None
    chained = {"input": "And then?", "previous_response_id": first.id}
    counted = client.responses.input_tokens.count(model=MODEL, **chained)
    assert counted.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    then = client.responses.create(model=MODEL, max_output_tokens=2, **chained)
    assert then.usage is not None and counted.input_tokens == then.usage.input_tokens
    cid = client.conversations.create(items=[user("Remember: 42.")]).id
    counted = client.responses.input_tokens.count(
        model=MODEL, input="Which number?", conversation=cid
    )
    turn = client.responses.create(
        model=MODEL, input="Which number?", conversation=cid, max_output_tokens=2
    )
    assert turn.usage is not None and counted.input_tokens == turn.usage.input_tokens


def test_a_count_of_nothing_is_the_create_s_400(http: httpx.Client) -> None:
    r = http.post("/v1/responses/input_tokens", json={"model": MODEL})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input"


def test_every_conversations_call_through_the_sdk(client: OpenAI) -> None:
    made = client.conversations.create(
        items=[user("one"), user("two"), user("three")], metadata={"topic": "numbers"}
    )
    cid = made.id
    assert cid.startswith("conv_") and made.object == "conversation"
    assert made.metadata == {"topic": "numbers"}
    assert client.conversations.retrieve(cid) == made
    updated = client.conversations.update(cid, metadata={"topic": "counting"})
    assert updated.metadata == {"topic": "counting"} and updated.created_at == made.created_at

    added = client.conversations.items.create(cid, items=[user("four"), user("five")])
    assert added.object == "list" and len(added.data) == 2 and added.has_more is False
    newest = client.conversations.items.list(cid, limit=2)  # desc, as OpenAI's default
    assert [_text(i) for i in newest.data] == ["five", "four"] and newest.has_more
    every = [_text(i) for i in client.conversations.items.list(cid, limit=2, order="asc")]
    assert every == ["one", "two", "three", "four", "five"]  # the SDK paged by `after`
    listed = client.conversations.items.list(
        cid, order="asc", include=["message.output_text.logprobs"]
    )
    second = listed.data[1]
    assert second.id is not None
    assert client.conversations.items.retrieve(second.id, conversation_id=cid) == second
    after = client.conversations.items.delete(second.id, conversation_id=cid)
    assert after.id == cid and after.object == "conversation"
    left = [_text(i) for i in client.conversations.items.list(cid, order="asc")]
    assert left == ["one", "three", "four", "five"]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(second.id, conversation_id=cid)

    deleted = client.conversations.delete(cid)
    assert (deleted.id, deleted.object, deleted.deleted) == (cid, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.retrieve(cid)
    assert gone.value.status_code == 404


def _text(item: Any) -> str:
    return str(item.content[0].text)


def test_responses_in_a_conversation(client: OpenAI) -> None:
    """The response names its conversation; its turn is in the conversation when the SDK
    has it; a stream's turn too; a chain together with a conversation is a 400."""
    cid = client.conversations.create(items=[user("My name is Ada.")]).id
    made = client.responses.create(
        model=MODEL, input="What is my name?", conversation=cid, max_output_tokens=3
    )
    assert made.conversation is not None and made.conversation.id == cid
    items = client.conversations.items.list(cid, order="asc").data
    assert [i.type for i in items] == ["message", "message", *[o.type for o in made.output]]
    assert [i.id for i in items[2:]] == [o.id for o in made.output]
    with client.responses.create(
        model=MODEL, input="Again?", conversation={"id": cid}, max_output_tokens=3, stream=True
    ) as stream:
        events = list(stream)
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    assert final.conversation is not None and final.conversation.id == cid
    items = client.conversations.items.list(cid, order="asc").data
    assert items[-1].id == final.output[-1].id
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(
            model=MODEL, input="x", conversation=cid, previous_response_id=made.id
        )
    assert both.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", conversation="conv_nope")


def test_a_conversation_s_next_turn_prefills_only_its_new_tokens(
    client: OpenAI, clean_text_bias: dict[str, float]
) -> None:
    """Three turns in one conversation: each next turn reads the conversation so far from
    the prefix cache (its answers re-encode as generated: the bias keeps them clean)."""
    cid = client.conversations.create(metadata={"session": "three turns"}).id
    k = f"conv-{uuid.uuid4().hex[:8]}"
    turns = []
    for said in (PROMPT, "And then what happened?", "And after that?"):
        turns.append(
            client.responses.create(
                model=MODEL,
                input=said,
                conversation=cid,
                temperature=0,
                max_output_tokens=20,
                prompt_cache_key=k,
                extra_body={"logit_bias": clean_text_bias},
            )
        )
    assert cached(turns[0]) == 0  # a fresh namespace
    for before, after in zip(turns, turns[1:], strict=False):
        assert before.usage is not None and after.usage is not None
        seen = before.usage.input_tokens + before.usage.output_tokens
        assert seen - 3 <= cached(after) < after.usage.input_tokens
    assert len(client.conversations.items.list(cid, limit=100).data) == 3 * 2


def test_what_http_shows_of_conversations(http: httpx.Client) -> None:
    r = http.post("/v1/conversations", json={"items": [user(str(i)) for i in range(21)]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "items"
    r = http.get("/v1/conversations/conv_unknown")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = http.get("/v1/conversations/resp_123")  # an id of another kind: none
    assert r.status_code == 404
    cid = http.post("/v1/conversations", json={}).json()["id"]
    r = http.post(f"/v1/conversations/{cid}/items", json={"items": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "items"
    r = http.get(f"/v1/conversations/{cid}/items", params={"order": "sideways"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "order"
    r = http.post(f"/v1/conversations/{cid}", json={"metadata": {"k": "v" * 513}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata"
    assert json.loads(http.get(f"/v1/conversations/{cid}").text)["metadata"] == {}


def test_each_key_sees_its_own_conversations(tiny_engine: Any, tmp_path: Path) -> None:
    """Behind two API keys, one key's conversation is a 404 to the other, in every call and
    as a response's conversation; its owner reads it, and its own turn is in it."""
    keys = {"alice": "sk-alice-" + "a" * 24, "bob": "sk-bob-" + "b" * 24}
    access = Access(keys=KeyRing([api_key(secret, name) for name, secret in keys.items()]))
    settings = Settings(db_path=str(tmp_path / "omni.db"), access=access)
    srv = ServerThread(settings, tiny_engine).start()
    try:
        alice, bob = (
            OpenAI(base_url=f"{srv.base_url}/v1", api_key=keys[name], max_retries=0,
                   _strict_response_validation=True)
            for name in ("alice", "bob")
        )  # fmt: skip
        cid = alice.conversations.create(items=[user("mine")]).id
        item = alice.conversations.items.list(cid).data[0].id
        assert item is not None
        for call in (
            lambda: bob.conversations.retrieve(cid),
            lambda: bob.conversations.update(cid, metadata={"k": "v"}),
            lambda: bob.conversations.items.list(cid),
            lambda: bob.conversations.items.create(cid, items=[user("theirs")]),
            lambda: bob.conversations.items.retrieve(item, conversation_id=cid),
            lambda: bob.conversations.items.delete(item, conversation_id=cid),
            lambda: bob.responses.create(model=MODEL, input="x", conversation=cid),
            lambda: bob.responses.input_tokens.count(model=MODEL, input="x", conversation=cid),
            lambda: bob.conversations.delete(cid),
        ):
            with pytest.raises(openai.NotFoundError):
                call()
        turn = alice.responses.create(
            model=MODEL, input="again", conversation=cid, max_output_tokens=2
        )
        listed = alice.conversations.items.list(cid, order="asc").data
        assert [i.id for i in listed] == [item, listed[1].id, *(o.id for o in turn.output)]
        assert _text(listed[1]) == "again"
        assert alice.conversations.retrieve(cid).metadata == {}
    finally:
        srv.stop()
