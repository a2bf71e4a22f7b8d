"""The body of POST /v1/images/generations, as OpenAI's. Omni keeps no files to link to, so
an image comes back as base64 (`b64_json`) only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_PROMPT = 32000  # characters, OpenAI's limit for its newest image model


class ImageGenerate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT)
    model: str | None = None
    n: int = Field(default=1, ge=1, le=10)
    size: str = Field(default="auto", pattern=r"^(auto|\d{2,4}x\d{2,4})$")
    response_format: Literal["b64_json"] = "b64_json"
    output_format: Literal["png", "jpeg", "webp"] = "png"
    stream: bool = False
    partial_images: int = Field(default=0, ge=0, le=3)
    user: str | None = None
