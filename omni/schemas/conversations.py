"""The bodies of the Conversations API (/v1/conversations). Unknown keys are ignored."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from omni.errors import InvalidRequest
from omni.schemas.metadata import Metadata

MAX_ITEMS = 20  # items added by one request, as OpenAI's


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[Any] | None = Field(default=None, max_length=MAX_ITEMS)
    metadata: Metadata | None = None


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metadata: Metadata | None


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[Any] = Field(min_length=1, max_length=MAX_ITEMS)


def conversation_id(value: Any) -> str | None:
    """A response request's `conversation`: its id, or `{"id": ...}`; None when absent."""
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
        return str(value["id"])
    raise InvalidRequest(
        "`conversation` must be a conversation's id or an object with its `id`.",
        param="conversation",
    )
