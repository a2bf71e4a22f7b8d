"""The bodies of POST /v1/chat/completions and POST /v1/completions (legacy)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from omni.schemas.sampling import SamplingExtras


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs `content`")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs `tool_call_id`")
        return self

    def text(self) -> str:
        """The content's text (image parts carry none)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.get("text") or p.get("refusal") or "" for p in self.content)

    @model_validator(mode="after")
    def _known_parts(self) -> ChatMessage:
        """Text and refusal parts; image_url parts in user messages (a string, or an object
        with `url` and `detail`): whether the model takes images is the service's to say."""
        if not isinstance(self.content, list):
            return self
        for part in self.content:
            kind = part.get("type")
            if kind == "image_url":
                if self.role != "user":
                    raise ValueError("image_url parts are accepted in user messages only")
                _image_url(part.get("image_url"))
            elif kind not in ("text", "refusal"):
                raise ValueError(
                    f"content parts of type {kind!r} are not supported (text, refusal, image_url)"
                )
        return self


def _image_url(value: Any) -> None:
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise ValueError("an image_url part needs `image_url` (a URL, or {url, detail})")
    if isinstance(value, dict) and value.get("detail") not in (None, "auto", "low", "high"):
        raise ValueError("image_url.detail is one of auto, low and high")


class _Sampling(SamplingExtras):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: list[str] | None = None
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> list[str] | None:
        stops = [value] if isinstance(value, str) else value
        if stops is not None and (
            not isinstance(stops, list) or len(stops) > 4 or any(not s for s in stops)
        ):
            raise ValueError("up to 4 non-empty stop sequences")
        return stops

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported")
        return value

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatCompletionCreate(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    # None: the server decides (kept, unless `omni serve --no-store-by-default`).
    store: bool | None = None
    prompt_cache_key: str | None = None
    reasoning_effort: str | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and (
            len(value) > 16 or any(len(k) > 64 or len(v) > 512 for k, v in value.items())
        ):
            raise ValueError("at most 16 keys, keys ≤ 64 and values ≤ 512 characters")
        return value

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionCreate(_Sampling):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    store: bool | None = None  # Omni's extension, as for a chat completion

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str:
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("one prompt per request (send a string)")
            return value[0]
        return value
