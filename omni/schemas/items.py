"""Input items of the Responses API, normalised into the shapes we store and list.

Items arrive in many shapes (an "easy" message without `type`, our own output items sent
back, function calls and their outputs); they leave as one canonical shape, ids assigned.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni.errors import InvalidRequest
from omni.ids import new_id


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow")


class _InputItem(_Item):
    """An input item; `stored` gives its canonical stored shape, with an id."""

    def stored(self, param: str) -> dict[str, Any]:
        raise NotImplementedError


class TextPart(_Item):
    type: Literal["input_text", "output_text", "text", "refusal"]
    text: str | None = None
    refusal: str | None = None


class ImagePart(_Item):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class Message(_InputItem):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        message = {
            "id": self.id or new_id("msg"),
            "type": "message",
            "role": self.role,
            "content": _parts(self, param),
            "status": self.status if self.status in _ITEM_STATUSES else "completed",
        }
        phase = (self.model_extra or {}).get("phase")
        if self.role == "assistant" and phase in ("commentary", "final_answer"):
            message["phase"] = phase
        return message


class FunctionCall(_InputItem):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        fields = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id or new_id("fc"), **_call_item(self.type, self.call_id, fields)}


class FunctionCallOutput(_InputItem):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        fields = {"output": self.output}
        return {"id": self.id or new_id("fco"), **_call_item(self.type, self.call_id, fields)}


def _call_item(type_: str, call_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A function call's item, or its output's, as stored: completed."""
    return {"type": type_, "call_id": call_id, **fields, "status": "completed"}


class Reasoning(_InputItem):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id or new_id("rs"),
            "type": "reasoning",
            "summary": self.summary,
        }
        for key in ("content", "encrypted_content", "status"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


class Compaction(_InputItem):
    """A compacted window sent back (omni.service.compaction): opaque, sealed by the server."""

    type: Literal["compaction"]
    encrypted_content: str
    id: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        content = self.encrypted_content
        return {"id": self.id or new_id("cmp"), "type": "compaction", "encrypted_content": content}


class CompactionTrigger(_InputItem):
    """Compact everything before it (the last input item only): the response is the compaction."""

    type: Literal["compaction_trigger"]
    id: str | None = None

    def stored(self, param: str) -> dict[str, Any]:
        return {"id": self.id or new_id("ct"), "type": "compaction_trigger"}


_ITEM_STATUSES = ("in_progress", "completed", "incomplete")
M = TypeVar("M", bound=BaseModel)


def _validated(model: type[M], raw: Any, what: str, param: str) -> M:
    """`raw` as `model`; a 400 naming the first field that is wrong."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InvalidRequest(f"Invalid {what}: {loc}: {err['msg']}", param=param) from None


_KINDS: dict[str, type[_InputItem]] = {
    "message": Message,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": Reasoning,
    "compaction": Compaction,
    "compaction_trigger": CompactionTrigger,
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
    image = _validated(ImagePart, part, "input_image", where)
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
    item = _validated(model, raw, "input item", param)
    return item.stored(param)


def normalize_input(raw: str | list[Any] | None) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [normalize_item({"role": "user", "content": raw}, "input")]
    items = [normalize_item(item, f"input[{i}]") for i, item in enumerate(raw)]
    for i, item in enumerate(items[:-1]):
        if item["type"] == "compaction_trigger":
            message = "A compaction_trigger must be the last input item."
            raise InvalidRequest(message, param=f"input[{i}]")
    return items
