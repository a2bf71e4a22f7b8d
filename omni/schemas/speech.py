"""The body of POST /v1/audio/speech, as OpenAI's: the voice is checked by the service against
the model's own voices, and the input's length against OpenAI's limit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_INPUT = 4096  # characters, OpenAI's limit
# OpenAI's formats, and the media type an answer in each carries.
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}


class SpeechCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    input: str = Field(min_length=1, max_length=MAX_INPUT)
    voice: str | None = None  # None: the model's default voice
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    instructions: str | None = Field(default=None, max_length=MAX_INPUT)
    stream_format: Literal["audio", "sse"] = "audio"

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_id(cls, value: object) -> object:
        """A custom voice comes as {"id": …}: its id is the voice's name."""
        return value.get("id") if isinstance(value, dict) else value
