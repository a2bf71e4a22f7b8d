"""POST /v1/embeddings: OpenAI's answer, the request recorded in the log (not the vectors)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from omni.api import access
from omni.api.admit import admit
from omni.api.gate import owner
from omni.schemas.embeddings import EmbeddingCreate

bp = Blueprint("embeddings", __name__)


@bp.post("/embeddings")
async def create_embeddings() -> Any:
    server, body = await admit(EmbeddingCreate)
    eid, answer = await server.embeddings.create(body, owner())
    access.note(id=eid, **access.usage_note(answer["usage"]))
    return answer
