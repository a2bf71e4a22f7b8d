"""The form fields of POST /v1/audio/transcriptions and /v1/audio/translations (the file
apart), as OpenAI's multipart request names them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from omni.errors import InvalidRequest

ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]


class TranscriptionCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")  # chunking_strategy, include[]: not Whisper's

    model: str | None = None
    language: str | None = Field(default=None, min_length=2, max_length=3)
    prompt: str | None = None
    response_format: ResponseFormat = "json"
    temperature: float = Field(default=0.0, ge=0.0, le=1.0)
    timestamp_granularities: list[Literal["word", "segment"]] = ["segment"]
    stream: bool = False

    @property
    def words(self) -> bool:
        return "word" in self.timestamp_granularities


def form_fields(form: Any) -> dict[str, Any]:
    """A multipart form's fields as the model reads them: `x[]` repeated is a list `x`, an
    empty value is left out, `stream` is a boolean's text."""
    out: dict[str, Any] = {}
    for key in form:
        values = [v for v in form.getlist(key) if v != ""]
        if key.endswith("[]"):
            out[key[:-2]] = values
        elif values:
            out[key] = values[-1]
    stream = out.get("stream")
    if isinstance(stream, str):
        if stream.lower() not in ("true", "false"):
            raise InvalidRequest("'stream' must be true or false.", param="stream")
        out["stream"] = stream.lower() == "true"
    return out
