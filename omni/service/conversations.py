"""The Conversations API's commands and queries over the event log, and a conversation's part
in a response: its items before the request's, and the turn's items added as it ends.

A conversation `conv_X` is two streams (omni.vocabulary): `conv_X/request` holds its creation
(the owner, the metadata), its metadata's updates and its tombstone; `conv_X` its items, each
added or deleted as a fact. A response's turn joins it in the transaction of the response's
ending (Run.ending), so a client that read the ending finds the turn in the conversation, and
a crash leaves both or neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from omni.errors import InvalidRequest, NotFound
from omni.events import Append, Appender, EventLog, NewEvent
from omni.ids import new_id
from omni.projections.conversation import fold_items
from omni.projections.input_items import page_items
from omni.protocol.recorder import ResponseRecorder
from omni.schemas.conversations import (
    ConversationCreate,
    ConversationUpdate,
    ItemsCreate,
    conversation_id,
)
from omni.schemas.items import ITEM_REFERENCE, normalize_item
from omni.schemas.responses import ResponseCreate
from omni.service.ownership import visible
from omni.service.serial import ObjectLocks
from omni.service.streams import dumps, request_stream
from omni.vocabulary import (
    ACCEPTED,
    CONVERSATION,
    CONVERSATION_DELETED,
    CONVERSATION_ITEM_ADDED,
    CONVERSATION_ITEM_DELETED,
    CONVERSATION_UPDATED,
    ID_PREFIXES,
)

# A response's ending, written by Runs: its appends, to which a turn adds its own.
Ending = Callable[[list[Append]], Awaitable[None]]
# The statuses whose turn joins its conversation: one that failed or was cancelled does not.
JOINS = ("completed", "incomplete")


@dataclass(frozen=True)
class Conversation:
    """A conversation's facts folded: its accepted request, metadata and items (in order)."""

    request: dict[str, Any]
    metadata: dict[str, str]
    items: list[dict[str, Any]]

    def to_json(self, conversation_id: str) -> dict[str, Any]:
        created_at = self.request["created_at"]
        return {"id": conversation_id, "object": "conversation", "created_at": created_at,
                "metadata": self.metadata}  # fmt: skip


class ConversationsService:
    kinds = (CONVERSATION,)

    def __init__(self, store: EventLog, appender: Appender):
        self.store = store
        self.appender = appender
        self.facts = ObjectLocks()  # one writer at a time of a conversation's facts

    # --- commands -------------------------------------------------------------

    async def create(self, body: ConversationCreate, owner: str | None = None) -> dict[str, Any]:
        cid = new_id("conv")
        items = _items(body.items or [], "items")
        request = {
            "kind": CONVERSATION,
            "body": {"metadata": body.metadata or {}, "store": True},
            "created_at": int(time.time()),
            "owner": owner,
        }
        await self.appender.append(
            Append(request_stream(cid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            *([Append(cid, 0, _added(items))] if items else []),
        )
        return Conversation(request, body.metadata or {}, items).to_json(cid)

    async def update(
        self, cid: str, body: ConversationUpdate, owner: str | None = None
    ) -> dict[str, Any]:
        async def write() -> dict[str, Any]:
            found = await self.read(cid, owner)
            metadata = body.metadata or {}
            await self._fact(cid, CONVERSATION_UPDATED, {"metadata": metadata})
            return Conversation(found.request, metadata, []).to_json(cid)

        return await self.facts.run(cid, write)

    async def delete(self, cid: str, owner: str | None = None) -> dict[str, Any]:
        """One tombstone: of concurrent deletes, the others find it deleted (404)."""

        async def write() -> None:
            await self.read(cid, owner)
            await self._fact(cid, CONVERSATION_DELETED, {})

        await self.facts.run(cid, write)
        return {"id": cid, "object": "conversation.deleted", "deleted": True}

    async def add_items(self, cid: str, body: ItemsCreate, owner: str | None = None
                        ) -> dict[str, Any]:  # fmt: skip
        items = _items(body.items, "items")

        async def write() -> None:
            await self.read(cid, owner)
            seq = await self.store.next_seq(cid)
            await self.appender.append(Append(cid, seq, _added(items)))

        await self.facts.run(cid, write)
        return page_items(items, None, len(items), "asc") | {"has_more": False}

    async def delete_item(self, cid: str, item_id: str, owner: str | None = None
                          ) -> dict[str, Any]:  # fmt: skip
        """The conversation as it is after the item went (OpenAI's answer)."""

        async def write() -> dict[str, Any]:
            found = await self.read(cid, owner)
            _find(found, item_id)
            row = NewEvent(CONVERSATION_ITEM_DELETED, dumps({"item_id": item_id}))
            await self.appender.append(Append(cid, await self.store.next_seq(cid), [row]))
            return found.to_json(cid)

        return await self.facts.run(cid, write)

    async def _fact(self, cid: str, type_: str, data: dict[str, Any]) -> None:
        """A fact of the request stream; the caller holds the conversation's lock."""
        stream = request_stream(cid)
        seq = await self.store.next_seq(stream)
        await self.appender.append(Append(stream, seq, [NewEvent(type_, dumps(data))]))

    async def recover(self, among: Sequence[str] | None = None) -> int:
        """Nothing runs in a conversation: a turn is its response's, recovered with it."""
        return 0

    async def close(self) -> None:
        """Every fact is written before its answer leaves: nothing to wait for."""

    # --- queries --------------------------------------------------------------

    async def read(self, cid: str, owner: str | None, param: str | None = None) -> Conversation:
        """`owner`'s undeleted conversation, folded, else 404 (another key's too)."""
        missing = NotFound(f"Conversation with id '{cid}' not found.", param=param)
        if not cid.startswith(ID_PREFIXES[CONVERSATION]):
            raise missing
        facts = await self.store.read(request_stream(cid))
        if not facts or facts[0].type != ACCEPTED:
            raise missing
        request = json.loads(facts[0].data)
        if request.get("kind") != CONVERSATION or not visible(request, owner):
            raise missing
        metadata = dict(request["body"].get("metadata") or {})
        for fact in facts[1:]:
            if fact.type == CONVERSATION_DELETED:
                raise missing
            if fact.type == CONVERSATION_UPDATED:
                metadata = json.loads(fact.data)["metadata"]
        rows = await self.store.read(cid)
        return Conversation(request, metadata, fold_items((r.type, r.data) for r in rows))

    async def retrieve(self, cid: str, owner: str | None = None) -> dict[str, Any]:
        return (await self.read(cid, owner)).to_json(cid)

    async def list_items(
        self, cid: str, after: str | None, limit: int, order: str, owner: str | None = None
    ) -> dict[str, Any]:
        items = (await self.read(cid, owner)).items
        return page_items(items, after, limit, order)  # type: ignore[arg-type]

    async def item(self, cid: str, item_id: str, owner: str | None = None) -> dict[str, Any]:
        return _find(await self.read(cid, owner), item_id)

    # --- a conversation's part in a response ----------------------------------

    async def context(self, body: ResponseCreate, owner: str | None) -> list[dict[str, Any]]:
        """The items a response in `body.conversation` reads before its input."""
        if body.previous_response_id is not None:
            raise InvalidRequest(
                "Mutually exclusive parameters: Ensure you are only providing one of: "
                "'previous_response_id' or 'conversation'.",
                param="conversation",
            )
        cid = conversation_id(body.conversation)
        assert cid is not None
        return (await self.read(cid, owner, param="conversation")).items

    def ending(self, response: dict[str, Any], items: list[dict[str, Any]],
               recorder: ResponseRecorder) -> Ending | None:  # fmt: skip
        """How the ending of `response` (its turn's input `items`) is written: with its turn
        added to its conversation, if it is in one, in the same transaction."""
        cid = (response.get("conversation") or {}).get("id")
        if cid is None:
            return None

        async def end(appends: list[Append]) -> None:
            async def write() -> None:
                final = recorder.response
                rows = _added([*items, *final.get("output", [])], final["id"])
                facts = await self.store.read(request_stream(cid))
                gone = any(f.type == CONVERSATION_DELETED for f in facts)
                if final.get("status") in JOINS and not gone:
                    appends.append(Append(cid, await self.store.next_seq(cid), rows))
                await self.appender.append(*appends)

            await self.facts.run(cid, write)

        return end


def _items(raw: list[Any], param: str) -> list[dict[str, Any]]:
    """Items as stored, ids assigned; a reference names no item of a conversation's own."""
    items = [normalize_item(item, f"{param}[{i}]") for i, item in enumerate(raw)]
    for i, item in enumerate(items):
        if item["type"] == ITEM_REFERENCE:
            raise InvalidRequest(
                "item_reference items cannot be added to a conversation: send the item.",
                param=f"{param}[{i}]",
            )
    return items


def _added(items: list[dict[str, Any]], response_id: str | None = None) -> list[NewEvent]:
    turn = {} if response_id is None else {"response_id": response_id}
    return [NewEvent(CONVERSATION_ITEM_ADDED, dumps({"item": i, **turn})) for i in items]


def _find(conversation: Conversation, item_id: str) -> dict[str, Any]:
    for item in conversation.items:
        if item.get("id") == item_id:
            return item
    raise NotFound(f"Item with id '{item_id}' not found.", param="item_id")
