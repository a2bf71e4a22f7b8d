"""The body of POST /v1/images/generations, as OpenAI's for its GPT image models: images come
back base64-encoded (`b64_json`) only, as theirs do; `url` is a 400, Omni keeping no files
to link to. Sizes follow gpt-image-2's rule: WIDTHxHEIGHT, each divisible by 16, the aspect
within 1:3 and 3:1. `seed` is Omni's: the same seed draws the same image."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_PROMPT = 32000  # characters, OpenAI's limit for its newest image model
DEFAULT_SIZE = (1024, 1024)  # what `auto` draws
MAX_SIDE = 3840  # OpenAI's largest
# Denoising steps per quality, as multiples of the model's own default (medium).
QUALITY_STEPS = {"low": 0.5, "medium": 1, "high": 2, "xhigh": 3, "max": 4}
Quality = Literal["low", "medium", "high", "xhigh", "max", "auto", "standard", "hd"]
_QUALITY_NAMES = {"auto": "medium", "standard": "medium", "hd": "high"}  # OpenAI's older names


class ImageGenerate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT)
    model: str | None = None
    n: int = Field(default=1, ge=1, le=10)
    size: str | None = "auto"
    quality: Quality | None = "auto"
    response_format: str | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = "png"
    output_compression: int | None = Field(default=None, ge=0, le=100)
    background: Literal["transparent", "opaque", "auto"] | None = "auto"
    stream: bool | None = False
    partial_images: int | None = Field(default=0, ge=0, le=3)
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    user: str | None = None

    @field_validator("response_format")
    @classmethod
    def _base64_only(cls, value: str | None) -> str | None:
        if value not in (None, "b64_json"):
            raise ValueError(
                f"'{value}' is not supported: this server keeps no image files to link to, and "
                "returns every image base64-encoded (b64_json), as OpenAI's GPT image models do"
            )
        return value

    @field_validator("background")
    @classmethod
    def _opaque_only(cls, value: str | None) -> str | None:
        if value == "transparent":
            raise ValueError("transparent backgrounds are not supported: the images are opaque")
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value in (None, "auto"):
            return value
        width, _, height = value.partition("x")
        if not (width.isdigit() and height.isdigit()):
            raise ValueError(f"'{value}' is not a size: give WIDTHxHEIGHT (e.g. 1024x1024)")
        w, h = int(width), int(height)
        if w % 16 or h % 16 or not (16 <= w <= MAX_SIDE and 16 <= h <= MAX_SIDE):
            raise ValueError(
                f"{value}: width and height must each be divisible by 16, from 16 to {MAX_SIDE}"
            )
        if max(w, h) > 3 * min(w, h):
            raise ValueError(f"{value}: the aspect ratio must be between 1:3 and 3:1")
        return value

    @property
    def dimensions(self) -> tuple[int, int]:
        """(width, height) to draw."""
        if self.size in (None, "auto"):
            return DEFAULT_SIZE
        width, _, height = self.size.partition("x")
        return int(width), int(height)

    @property
    def quality_name(self) -> str:
        """low, medium, high, xhigh or max: what the answer reports."""
        quality = self.quality or "auto"
        return _QUALITY_NAMES.get(quality, quality)

    def steps(self, default_steps: int) -> int:
        """The denoising steps for the quality asked, from the model's default (medium)."""
        return max(1, round(default_steps * QUALITY_STEPS[self.quality_name]))
