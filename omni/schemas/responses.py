"""The body of POST /v1/responses. Unknown keys are ignored, as OpenAI's SDK expects."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from omni.schemas.metadata import Metadata
from omni.schemas.sampling import SamplingExtras


class ContextManagement(BaseModel):
    """One entry of `context_management`: compaction past `compact_threshold` prompt tokens."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1)


class ResponseCreate(SamplingExtras):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    store: bool = True
    stream: bool = False
    background: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    metadata: Metadata | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    text: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    max_tool_calls: int | None = None
    stream_options: dict[str, Any] | None = None
    context_management: list[ContextManagement] | None = None

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise ValueError("must be 'none', 'auto', 'required' or an object")
        return value
