"""POST /v1/embeddings: OpenAI's answer, the request recorded in the log (not the vectors)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, current_app

from omni.api import access
from omni.api.body import body_bytes
from omni.api.gate import owner
from omni.errors import ModelNotFound, ShuttingDown
from omni.schemas.body import parse_body
from omni.schemas.embeddings import EmbeddingCreate

bp = Blueprint("embeddings", __name__)


@bp.post("/embeddings")
async def create_embeddings() -> Any:
    state = current_app.config["OMNI"]
    body = parse_body(await body_bytes(), EmbeddingCreate)
    if state.responses.runs.closing:
        raise ShuttingDown("The server is shutting down; retry shortly.")
    if state.embeddings is None:  # a server started without a model pool
        raise ModelNotFound("This server serves no embedding model.", param="model")
    eid, answer = await state.embeddings.create(body, owner())
    access.note(id=eid, **access.usage_note(answer["usage"]))
    return answer
