"""The bodies of the Conversations API (/v1/conversations). Unknown keys are ignored."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from omni.errors import InvalidRequest

MAX_ITEMS = 20  # items added by one request, as OpenAI's


def _bounded(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("at most 16 keys")
    for key, val in value.items():
        if len(key) > 64 or len(val) > 512:
            raise ValueError("keys are at most 64 characters, values at most 512")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(_bounded)]


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
