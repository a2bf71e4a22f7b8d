"""`item_reference` input items at the service: an id the caller cannot see (unknown, of a
chat completion, of an unstored or deleted response, another owner's) is refused as a 400
naming `input[i]`, and nothing is written (the HTTP error body, the SDK and the Vercel AI
SDK's stream: tests/api/test_item_reference.py)."""

from __future__ import annotations

from typing import Any

import pytest

from omni.errors import InvalidRequest
from omni.ports.jobs import Delta, Finished
from omni.schemas.chat import ChatCompletionCreate
from omni.schemas.responses import ResponseCreate

from .conftest import Services, high_water

GREEDY = {"input": "go on and on", "temperature": 0.0}


async def create(services: Services, owner: str | None = None, **body: Any) -> dict[str, Any]:
    """A response created and read to its end, as a non-streaming client does: the final one."""
    services.engine.scripts.append(
        [Delta("Once", 10), Delta(" upon", 11), Finished("length", 3, 2)]
    )
    responses = services.responses
    rid = (await responses.create(ResponseCreate.model_validate(body), owner))["id"]
    try:
        return await responses.wait(rid)
    finally:
        responses.release(rid)


async def first_turn(services: Services, owner: str | None = None, **extra: Any) -> tuple[Any, Any]:
    """A finished first turn and its one input item (the user's message)."""
    r1 = await create(services, owner, max_output_tokens=4, **GREEDY, **extra)
    assert r1["output"] and r1["output"][0]["type"] == "message"
    if not extra.get("store", True):
        return r1, None
    (asked,) = (await services.responses.input_items(r1["id"], None, 20, "desc", owner))["data"]
    return r1, asked


async def stored_chat(services: Services) -> str:
    services.engine.scripts.append([Delta("Hi", 10), Finished("length", 3, 1)])
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "store": True}
    cid, _ = await services.completions.create_chat(ChatCompletionCreate.model_validate(body))
    await services.completions.wait(cid)
    services.completions.release(cid)
    return cid


# An empty id is the schema's to refuse (input[1].id): tests/api/test_item_reference.py.
@pytest.mark.parametrize(
    "unknown", ["msg_0000", "chatcmpl-{chat}", "{chat}-0", "{unstored}", "{deleted}"]
)
async def test_a_reference_the_caller_cannot_see_is_400_naming_it(
    logged: Services, unknown: str
) -> None:
    chat = await stored_chat(logged)
    unstored = (await first_turn(logged, store=False))[0]["output"][0]["id"]
    deleted = (await first_turn(logged))[0]
    await logged.responses.delete(deleted["id"])
    ref = unknown.format(chat=chat, unstored=unstored, deleted=deleted["output"][0]["id"])
    before = high_water(logged)
    body = {"input": [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": ref}]}
    with pytest.raises(InvalidRequest) as exc:
        await logged.responses.create(ResponseCreate.model_validate(body))
    assert exc.value.status == 400
    assert exc.value.param == "input[1]"
    assert exc.value.message == f"Item with id '{ref}' not found."
    assert high_water(logged) == before  # nothing was written
    with pytest.raises(InvalidRequest):
        await create(logged, input=[{"type": "item_reference", "id": ref}])


async def test_another_owners_item_is_not_found(services: Services) -> None:
    """Each key's requests carry its owner (tests/api/test_access.py): bob's cannot see
    alice's items."""
    r1, asked = await first_turn(services, "alice")
    for item_id in (asked["id"], r1["output"][0]["id"]):
        with pytest.raises(InvalidRequest) as exc:
            await create(services, "bob", input=[{"type": "item_reference", "id": item_id}])
        assert exc.value.param == "input[0]"
        mine = await create(
            services,
            "alice",
            input=[{"type": "item_reference", "id": item_id}],
            max_output_tokens=1,
        )
        listed = await services.responses.input_items(mine["id"], None, 20, "desc", "alice")
        assert listed["data"][0]["id"] == item_id
