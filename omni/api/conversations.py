"""The Conversations API: create, retrieve, update and delete a conversation; list, add,
retrieve and delete its items. `include` is accepted and changes nothing: items are kept
whole."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from omni.api import access
from omni.api.admit import admit
from omni.api.current import current_server
from omni.api.gate import owner
from omni.api.query import page_args
from omni.schemas.conversations import ConversationCreate, ConversationUpdate, ItemsCreate
from omni.service.conversations import ConversationsService

bp = Blueprint("conversations", __name__)


def _service() -> ConversationsService:
    return current_server().conversations


@bp.post("/conversations")
async def create() -> Any:
    server, body = await admit(ConversationCreate)
    created = await server.conversations.create(body, owner())
    access.note(id=created["id"])
    return created


@bp.get("/conversations/<conversation_id>")
async def retrieve(conversation_id: str) -> Any:
    return await _service().retrieve(conversation_id, owner())


@bp.post("/conversations/<conversation_id>")
async def update(conversation_id: str) -> Any:
    server, body = await admit(ConversationUpdate)
    return await server.conversations.update(conversation_id, body, owner())


@bp.delete("/conversations/<conversation_id>")
async def delete(conversation_id: str) -> Any:
    return await _service().delete(conversation_id, owner())


@bp.get("/conversations/<conversation_id>/items")
async def list_items(conversation_id: str) -> Any:
    after, limit, order = page_args("desc")
    return await _service().list_items(conversation_id, after, limit, order, owner())


@bp.post("/conversations/<conversation_id>/items")
async def add_items(conversation_id: str) -> Any:
    server, body = await admit(ItemsCreate)
    return await server.conversations.add_items(conversation_id, body, owner())


@bp.get("/conversations/<conversation_id>/items/<item_id>")
async def item(conversation_id: str, item_id: str) -> Any:
    return await _service().item(conversation_id, item_id, owner())


@bp.delete("/conversations/<conversation_id>/items/<item_id>")
async def delete_item(conversation_id: str, item_id: str) -> Any:
    return await _service().delete_item(conversation_id, item_id, owner())
