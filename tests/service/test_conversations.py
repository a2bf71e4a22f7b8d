"""ConversationsService on the in-memory store: a conversation's facts, its items, its owner,
and its part in a response (its items read before the input, the turn added as it ends)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from omni.errors import InvalidRequest, NotFound
from omni.ports.jobs import Delta, Failed, Finished
from omni.schemas.conversations import ConversationCreate, ConversationUpdate, ItemsCreate
from omni.schemas.responses import ResponseCreate
from omni.service.conversations import ConversationsService
from omni.vocabulary import (
    ACCEPTED,
    CONVERSATION_DELETED,
    CONVERSATION_ITEM_ADDED,
    CONVERSATION_ITEM_DELETED,
    CONVERSATION_UPDATED,
)

from .conftest import ScriptedEngine, Services


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def texts(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["role"], i["content"][0]["text"]) for i in items]


async def turn(services: Services, body: ResponseCreate, *script: Any) -> dict[str, Any]:
    outputs: list[Any] = list(script) or [Delta("ok", 5), Finished("stop", 3, 1)]
    services.engine.scripts.append(outputs)
    rid = (await services.responses.create(body))["id"]
    final = await services.responses.wait(rid)
    services.responses.release(rid)
    return final


async def test_a_conversation_is_created_read_updated_and_deleted(services: Services) -> None:
    conversations = services.responses.conversations
    created = await conversations.create(
        ConversationCreate(items=[user("hi"), user("there")], metadata={"topic": "tea"})
    )
    cid = created["id"]
    assert cid.startswith("conv_") and created["object"] == "conversation"
    assert created["metadata"] == {"topic": "tea"} and isinstance(created["created_at"], int)
    assert await conversations.retrieve(cid) == created
    updated = await conversations.update(cid, ConversationUpdate(metadata={"topic": "coffee"}))
    assert updated == {**created, "metadata": {"topic": "coffee"}}
    assert await conversations.retrieve(cid) == updated
    assert await conversations.delete(cid) == {
        "id": cid,
        "object": "conversation.deleted",
        "deleted": True,
    }
    for read in (conversations.retrieve(cid), conversations.delete(cid)):
        with pytest.raises(NotFound):
            await read
    facts = [e.type for e in await services.store.read(f"{cid}/request")]
    assert facts == [ACCEPTED, CONVERSATION_UPDATED, CONVERSATION_DELETED]
    assert [e.type for e in await services.store.read(cid)] == [CONVERSATION_ITEM_ADDED] * 2


async def test_concurrent_deletes_write_one_tombstone(services: Services) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate()))["id"]
    results = await asyncio.gather(
        *(conversations.delete(cid) for _ in range(5)), return_exceptions=True
    )
    assert sum(isinstance(r, dict) for r in results) == 1
    assert sum(isinstance(r, NotFound) for r in results) == 4
    facts = [e.type for e in await services.store.read(f"{cid}/request")]
    assert facts.count(CONVERSATION_DELETED) == 1


async def test_items_are_listed_paged_added_read_and_deleted(services: Services) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate(items=[user("a"), user("b")])))["id"]
    added = await conversations.add_items(cid, ItemsCreate(items=[user("c"), user("d")]))
    assert added["object"] == "list" and added["has_more"] is False
    assert texts(added["data"]) == [("user", "c"), ("user", "d")]
    ids = [i["id"] for i in (await conversations.list_items(cid, None, 20, "asc"))["data"]]
    assert len(ids) == 4 and all(i.startswith("msg_") for i in ids)
    newest = await conversations.list_items(cid, None, 3, "desc")  # OpenAI's default order
    assert [i["id"] for i in newest["data"]] == ids[::-1][:3] and newest["has_more"] is True
    rest = await conversations.list_items(cid, newest["last_id"], 3, "desc")
    assert [i["id"] for i in rest["data"]] == [ids[0]] and rest["has_more"] is False
    assert (await conversations.item(cid, ids[1]))["content"][0]["text"] == "b"
    after = await conversations.delete_item(cid, ids[1])
    assert after == await conversations.retrieve(cid)  # the conversation, as OpenAI answers
    listed = await conversations.list_items(cid, None, 20, "asc")
    assert [i["id"] for i in listed["data"]] == [ids[0], *ids[2:]]
    for gone in (conversations.item(cid, ids[1]), conversations.delete_item(cid, ids[1])):
        with pytest.raises(NotFound):
            await gone
    rows = await services.store.read(cid)
    assert [e.type for e in rows][-1] == CONVERSATION_ITEM_DELETED
    assert json.loads(rows[-1].data) == {"item_id": ids[1]}


async def test_an_item_reference_is_refused_with_its_place(services: Services) -> None:
    conversations = services.responses.conversations
    with pytest.raises(InvalidRequest) as refused:
        await conversations.create(
            ConversationCreate(items=[user("a"), {"type": "item_reference", "id": "msg_1"}])
        )
    assert refused.value.param == "items[1]"


async def test_another_owners_conversation_is_not_found(services: Services) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate(items=[user("a")]), "alice"))["id"]
    assert (await conversations.retrieve(cid, "alice"))["id"] == cid
    for read in (
        conversations.retrieve(cid, "bob"),
        conversations.list_items(cid, None, 20, "asc", "bob"),
        conversations.add_items(cid, ItemsCreate(items=[user("x")]), "bob"),
        conversations.update(cid, ConversationUpdate(metadata={}), "bob"),
        conversations.delete(cid, "bob"),
    ):
        with pytest.raises(NotFound):
            await read
    with pytest.raises(NotFound) as in_response:
        await services.responses.create(ResponseCreate(input="x", conversation=cid), "bob")
    assert in_response.value.param == "conversation"
    assert len((await conversations.list_items(cid, None, 20, "asc", "alice"))["data"]) == 1


async def test_ids_of_other_kinds_are_not_conversations(services: Services) -> None:
    final = await turn(services, ResponseCreate(input="hi"))
    with pytest.raises(NotFound):
        await services.responses.conversations.retrieve(final["id"])


async def test_a_turn_reads_the_conversation_and_joins_it() -> None:
    from omni.events import MemoryStore

    from .conftest import serving

    async with serving(MemoryStore(), ScriptedEngine()) as services:
        engine = services.engine
        assert isinstance(engine, ScriptedEngine)
        conversations = services.responses.conversations
        cid = (await conversations.create(ConversationCreate(items=[user("I am Ada.")])))["id"]
        final = await turn(
            services,
            ResponseCreate(input="Who am I?", conversation={"id": cid}, instructions="Be brief."),
            Delta("Ada", 5),
            Finished("stop", 3, 1),
        )
        assert final["conversation"] == {"id": cid} and final["status"] == "completed"
        assert [m["content"] for m in engine.rendered[-1]] == [
            "Be brief.",
            "I am Ada.",
            "Who am I?",
        ]
        listed = (await conversations.list_items(cid, None, 20, "asc"))["data"]
        assert texts(listed) == [
            ("user", "I am Ada."),
            ("user", "Who am I?"),
            ("assistant", "Ada"),
        ]
        assert listed[-1] == final["output"][0]  # the output item itself, its id kept
        rows = await services.store.read(cid)
        assert [json.loads(r.data).get("response_id") for r in rows] == [None, *[final["id"]] * 2]
        await turn(services, ResponseCreate(input="And again?", conversation=cid))
        assert [m["content"] for m in engine.rendered[-1]] == [
            "I am Ada.",
            "Who am I?",
            "Ada",
            "And again?",
        ]


async def test_a_failed_turn_does_not_join(services: Services) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate(items=[user("a")])))["id"]
    final = await turn(services, ResponseCreate(input="b", conversation=cid), Failed("boom"))
    assert final["status"] == "failed"
    assert texts((await conversations.list_items(cid, None, 20, "asc"))["data"]) == [("user", "a")]


async def test_a_turn_ending_after_its_conversation_was_deleted_adds_nothing(
    services: Services,
) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate()))["id"]
    services.engine.scripts.append([Delta("o", 5)])  # held until cancelled
    rid = (await services.responses.create(ResponseCreate(input="b", conversation=cid)))["id"]
    await conversations.delete(cid)
    services.engine.jobs[-1].outputs.put_nowait(Finished("stop", 3, 1))  # it ends now
    assert (await services.responses.wait(rid))["status"] == "completed"
    services.responses.release(rid)
    assert await services.store.read(cid) == []


async def test_one_turn_at_a_time_in_a_conversation(services: Services) -> None:
    """A response created while another runs in the same conversation is refused with
    OpenAI's conversation_locked; another conversation is free; once the running turn has
    joined, the next one reads it."""
    conversations = services.responses.conversations
    cid, other = [(await conversations.create(ConversationCreate()))["id"] for _ in range(2)]
    services.engine.scripts.append([Delta("o", 5)])  # held until it is ended
    rid = (await services.responses.create(ResponseCreate(input="a", conversation=cid)))["id"]
    with pytest.raises(InvalidRequest) as locked:
        await services.responses.create(ResponseCreate(input="b", conversation=cid))
    assert (locked.value.code, locked.value.param) == ("conversation_locked", "conversation")
    await turn(services, ResponseCreate(input="c", conversation=other))
    services.engine.jobs[0].outputs.put_nowait(Finished("stop", 3, 1))
    await services.responses.wait(rid)
    await turn(services, ResponseCreate(input="b", conversation=cid))
    listed = texts((await conversations.list_items(cid, None, 20, "asc"))["data"])
    assert listed == [("user", "a"), ("assistant", "o"), ("user", "b"), ("assistant", "ok")]


async def test_previous_response_id_and_conversation_together_are_refused(
    services: Services,
) -> None:
    conversations = services.responses.conversations
    cid = (await conversations.create(ConversationCreate()))["id"]
    previous = await turn(services, ResponseCreate(input="a"))
    body = ResponseCreate(input="b", conversation=cid, previous_response_id=previous["id"])
    with pytest.raises(InvalidRequest) as refused:
        await services.responses.create(body)
    assert refused.value.param == "conversation" and "Mutually exclusive" in refused.value.message
    body = ResponseCreate(input="b", conversation=cid, previous_response_id="resp_gone")
    with pytest.raises(InvalidRequest) as unknown_chain:  # not "previous response not found"
        await services.responses.create(body)
    assert unknown_chain.value.param == "conversation"
    for bad in (7, {"name": "x"}, ""):
        with pytest.raises(InvalidRequest) as shaped:
            await services.responses.create(ResponseCreate(input="b", conversation=bad))
        assert shaped.value.param == "conversation"


async def test_the_server_builds_one_conversations_service(services: Services) -> None:
    assert isinstance(services.responses.conversations, ConversationsService)


async def test_a_background_turn_continued_after_a_restart_joins_its_conversation() -> None:
    """Killed mid-turn (the log copied as a kill -9 leaves it), the next start continues the
    background run from its recorded tokens; its ending adds the turn to the conversation."""
    import copy

    from omni.events import MemoryStore

    from .conftest import serving

    store, first = MemoryStore(), ScriptedEngine()
    first.scripts.append([Delta("Hel", 10), Delta("lo", 11)])  # then the server "dies"
    async with serving(store, first) as served:
        conversations = served.responses.conversations
        cid = (await conversations.create(ConversationCreate(items=[user("a")])))["id"]
        body = ResponseCreate(input="b", conversation=cid, background=True)
        rid = (await served.responses.create(body))["id"]
        # Both tokens recorded (beside their deltas): then the server "dies".
        while sum(len(json.loads(r.data)) for r in await store.read(f"{rid}/tokens")) < 2:
            await asyncio.sleep(0.01)
        crashed = copy.deepcopy(store)
    second = ScriptedEngine()
    second.scripts.append([Delta(" there", 12), Finished("stop", 3, 3)])
    async with serving(crashed, second) as served:
        final = await served.responses.wait(rid)
        listed = await served.responses.conversations.list_items(cid, None, 20, "asc")
    assert final["status"] == "completed" and final["conversation"] == {"id": cid}
    assert texts(listed["data"]) == [("user", "a"), ("user", "b"), ("assistant", "Hello there")]
