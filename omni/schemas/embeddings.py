"""The body of POST /v1/embeddings. `input`'s four shapes (a string, strings, token ids, lists
of token ids) are told apart and checked by the service, which names the index at fault."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class EmbeddingCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: Any
    model: str | None = None  # None: the server's default embedding model
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(default=None, ge=1)
    user: str | None = None
