"""The bodies of POST /v1/messages and POST /v1/messages/count_tokens (Anthropic's shapes).

Unknown keys are ignored (a newer SDK's or Claude Code's: `context_management`, `container`,
beta fields), known ones are checked; what Anthropic's own API refuses is a 400 here too."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from omni.schemas.sampling import SamplingExtras

# The blocks each role's content may hold (a `system` message: the beta API's instructions
# in the conversation, as Claude Code sends them; its tool additions and removals do not run).
BLOCKS = {
    "user": ("text", "image", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
    "system": ("text",),
}
EFFORTS = ("low", "medium", "high", "xhigh", "max")


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]
    # A system message's: "next_user_message" shows it only until a later user message.
    clear_at: Literal["next_user_message", "never"] | None = None

    @model_validator(mode="after")
    def _known_blocks(self) -> MessageParam:
        if isinstance(self.content, str):
            return self
        for block in self.content:
            kind = block.get("type")
            if kind not in BLOCKS[self.role]:
                allowed = ", ".join(BLOCKS[self.role])
                raise ValueError(
                    f"content blocks of type {kind!r} are not accepted in {self.role} "
                    f"messages (accepted: {allowed})"
                )
            _CHECKS[kind](block)
        return self


def _text(block: dict[str, Any]) -> None:
    if not isinstance(block.get("text"), str):
        raise ValueError("a text block needs `text` (a string)")


def _image(block: dict[str, Any]) -> None:
    source = block.get("source")
    if not isinstance(source, dict):
        raise ValueError("an image block needs `source`")
    if source.get("type") == "base64":
        if not isinstance(source.get("data"), str) or not source.get("media_type"):
            raise ValueError("a base64 image source needs `media_type` and `data`")
    elif source.get("type") == "url":
        if not isinstance(source.get("url"), str) or not source["url"]:
            raise ValueError("a url image source needs `url`")
    else:
        raise ValueError("an image source's type is base64 or url")


def _tool_use(block: dict[str, Any]) -> None:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise ValueError("a tool_use block needs `id` and `name`")
    if not isinstance(block.get("input"), dict):
        raise ValueError("a tool_use block's `input` is an object")


def _tool_result(block: dict[str, Any]) -> None:
    if not isinstance(block.get("tool_use_id"), str):
        raise ValueError("a tool_result block needs `tool_use_id`")
    content = block.get("content", "")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ValueError("a tool_result's content is a string or text and image blocks")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("text", "image"):
            raise ValueError("a tool_result's content blocks are text or image blocks")
        (_text if kind == "text" else _image)(part)


def _thinking(block: dict[str, Any]) -> None:
    if not isinstance(block.get("thinking"), str):
        raise ValueError("a thinking block needs `thinking`")


def _passed_back(block: dict[str, Any]) -> None:
    """redacted_thinking: passed back as received; it tells a local model nothing."""


_CHECKS = {
    "text": _text,
    "image": _image,
    "tool_use": _tool_use,
    "tool_result": _tool_result,
    "thinking": _thinking,
    "redacted_thinking": _passed_back,
}


class ToolParam(BaseModel):
    """A client tool (Anthropic's `custom` tools). Omni runs no server tools."""

    model_config = ConfigDict(extra="ignore")

    type: str | None = None
    name: str = Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    input_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _client_tool(self) -> ToolParam:
        if self.type not in (None, "custom"):
            raise ValueError(
                f"server tools ({self.type!r}) do not run here: send client tools, each "
                "with `name` and `input_schema`"
            )
        if self.input_schema is None:
            raise ValueError("a tool needs `input_schema`")
        return self

    def function(self) -> dict[str, Any]:
        """The tool as a chat completion's function tool."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.input_schema}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


class MessagesRequest(SamplingExtras):
    """What a create and a token count share: the prompt and the tools."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None

    @field_validator("system")
    @classmethod
    def _system(cls, value: str | list[dict[str, Any]] | None) -> Any:
        for block in value if isinstance(value, list) else []:
            if block.get("type") != "text":
                raise ValueError("system blocks are text blocks")
            _text(block)
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        if value.get("type") not in ("auto", "any", "tool", "none"):
            raise ValueError("tool_choice.type is auto, any, tool or none")
        if value["type"] == "tool" and not isinstance(value.get("name"), str):
            raise ValueError("a tool_choice of type tool needs `name`")
        return value

    @field_validator("thinking")
    @classmethod
    def _thinking(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        if value.get("type") not in ("enabled", "disabled", "adaptive"):
            raise ValueError("thinking.type is enabled, disabled or adaptive")
        budget = value.get("budget_tokens")
        if value["type"] == "enabled" and (not isinstance(budget, int) or budget < 1):
            raise ValueError("enabled thinking needs `budget_tokens` (a positive integer)")
        return value

    @field_validator("output_config")
    @classmethod
    def _output_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        effort = value.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise ValueError(f"output_config.effort is one of {', '.join(EFFORTS)}")
        form = value.get("format")
        if form is not None and (
            not isinstance(form, dict)
            or form.get("type") != "json_schema"
            or not isinstance(form.get("schema"), dict)
        ):
            raise ValueError("output_config.format is {type: json_schema, schema: {...}}")
        return value

    @field_validator("messages")
    @classmethod
    def _ends_with_user(cls, value: list[MessageParam]) -> list[MessageParam]:
        said = [m for m in value if m.role != "system"]
        if value and (not said or said[-1].role != "user"):
            raise ValueError(
                "the last message must be the user's: a final assistant message (a prefill) "
                "is not supported"
            )
        return value

    @property
    def system_text(self) -> str:
        if isinstance(self.system, str):
            return self.system
        return "\n".join(block["text"] for block in self.system or [])


class MessageCreate(MessagesRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    metadata: dict[str, Any] | None = None
    stream: bool = False
    # Omni's extension, as a chat completion's: false keeps nothing once it is read.
    store: bool = True

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not s for s in value):
            raise ValueError("stop sequences are non-empty strings")
        return value

    @property
    def user(self) -> str | None:
        user_id = (self.metadata or {}).get("user_id")
        return user_id if isinstance(user_id, str) else None
