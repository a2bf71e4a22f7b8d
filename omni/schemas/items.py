"""Input items of the Responses API, normalised into the shapes we store and list.

Items arrive in many shapes (an "easy" message without `type`, our own output items sent
back, function calls and their outputs); they leave as one canonical shape, ids assigned.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni.errors import InvalidRequest
from omni.ids import new_id


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Item):
    type: Literal["input_text", "output_text", "text", "refusal"]
    text: str | None = None
    refusal: str | None = None


class ImagePart(_Item):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class Message(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None


class FunctionCall(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutput(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None


class Reasoning(_Item):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: str | None = None


_ITEM_STATUSES = ("in_progress", "completed", "incomplete")

_KINDS: dict[str, type[_Item]] = {
    "message": Message,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": Reasoning,
}


def _parts(message: Message, param: str) -> list[dict[str, Any]]:
    """Message content as parts: output_text for the assistant, input_text for the others."""
    kind = "output_text" if message.role == "assistant" else "input_text"
    raw = message.content
    if isinstance(raw, str):
        raw = [{"type": kind, "text": raw}]
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(raw):
        where = f"{param}.content[{j}]"
        if isinstance(part, dict) and part.get("type") == "input_image":
            parts.append(_image(part, message.role, where))
            continue
        try:
            parsed = TextPart.model_validate(part)
        except ValidationError:
            ptype = part.get("type") if isinstance(part, dict) else None
            raise InvalidRequest(
                f"Unsupported content part type {ptype!r}: content parts are input_text, "
                "output_text, refusal and input_image.",
                param=where,
            ) from None
        if parsed.type == "refusal":
            parts.append({"type": "refusal", "refusal": parsed.refusal or ""})
            continue
        if parsed.text is None:
            raise InvalidRequest("A text content part needs `text`.", param=f"{where}.text")
        if kind == "output_text":
            parts.append(
                {"type": "output_text", "text": parsed.text, "annotations": [], "logprobs": []}
            )
        else:
            parts.append({"type": "input_text", "text": parsed.text})
    return parts


def _image(part: dict[str, Any], role: str, where: str) -> dict[str, Any]:
    """An input_image part as stored: its URL as the client sent it (a data: URL too), which
    input_items returns; whether the model takes images is the service's to say."""
    try:
        image = ImagePart.model_validate(part)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InvalidRequest(f"Invalid input_image: {loc}: {err['msg']}", param=where) from None
    if role != "user":
        raise InvalidRequest("Images are accepted in user messages only.", param=where)
    if image.file_id is not None:
        raise InvalidRequest(
            "file_id images are not supported: this server has no files API. Send the image "
            "as image_url (an http(s) URL or a data: URL).",
            param=f"{where}.file_id",
        )
    if not image.image_url:
        raise InvalidRequest("An input_image needs `image_url`.", param=f"{where}.image_url")
    return {
        "type": "input_image",
        "detail": image.detail or "auto",
        "file_id": None,
        "image_url": image.image_url,
    }


ITEM_REFERENCE = "item_reference"


def is_reference(raw: dict[str, Any]) -> bool:
    """`{"type": "item_reference", "id": ...}`; its type is optional in OpenAI's schema, so
    `{"id": ...}` alone is one too (a message without `type` has a role and content)."""
    return raw.get("type") == ITEM_REFERENCE or (
        raw.get("type") is None and "id" in raw and set(raw) <= {"id", "type"}
    )


def normalize_item(raw: Any, param: str) -> dict[str, Any]:
    """One input item in its canonical stored shape, with an id; a reference to a stored
    item stays `{"type": "item_reference", "id": ...}`, for the service to resolve."""
    if not isinstance(raw, dict):
        raise InvalidRequest("Each input item must be an object.", param=param)
    if is_reference(raw):
        if not isinstance(raw.get("id"), str) or not raw["id"]:
            raise InvalidRequest("An item_reference needs the item's `id`.", param=f"{param}.id")
        return {"type": ITEM_REFERENCE, "id": raw["id"]}
    kind = raw.get("type") or "message"
    model = _KINDS.get(kind)
    if model is None:
        raise InvalidRequest(f"Input items of type {kind!r} are not supported.", param=param)
    try:
        item = model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InvalidRequest(f"Invalid input item: {loc}: {err['msg']}", param=param) from None
    if isinstance(item, Message):
        message = {
            "id": item.id or new_id("msg"),
            "type": "message",
            "role": item.role,
            "content": _parts(item, param),
            "status": item.status if item.status in _ITEM_STATUSES else "completed",
        }
        phase = (item.model_extra or {}).get("phase")
        if item.role == "assistant" and phase in ("commentary", "final_answer"):
            message["phase"] = phase
        return message
    if isinstance(item, FunctionCall):
        return {
            "id": item.id or new_id("fc"),
            "type": "function_call",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
            "status": "completed",
        }
    if isinstance(item, FunctionCallOutput):
        return {
            "id": item.id or new_id("fco"),
            "type": "function_call_output",
            "call_id": item.call_id,
            "output": item.output,
            "status": "completed",
        }
    assert isinstance(item, Reasoning)
    out: dict[str, Any] = {
        "id": item.id or new_id("rs"),
        "type": "reasoning",
        "summary": item.summary,
    }
    for key in ("content", "encrypted_content", "status"):
        if getattr(item, key) is not None:
            out[key] = getattr(item, key)
    return out


def normalize_input(raw: str | list[Any] | None) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [normalize_item({"role": "user", "content": raw}, "input")]
    return [normalize_item(item, f"input[{i}]") for i, item in enumerate(raw)]
