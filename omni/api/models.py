"""GET /v1/models and /v1/models/{id}."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, current_app

from omni.errors import ModelNotFound

bp = Blueprint("models", __name__)


def _model(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "omni"}


@bp.get("/models")
async def list_models() -> dict[str, Any]:
    state = current_app.config["OMNI"]
    return {"object": "list", "data": [_model(state.engine.model_id, state.started_at)]}


@bp.get("/models/<path:model_id>")
async def get_model(model_id: str) -> dict[str, Any]:
    state = current_app.config["OMNI"]
    if model_id not in state.responses.model_aliases:
        raise ModelNotFound(f"The model '{model_id}' does not exist.", param="model")
    return _model(state.engine.model_id, state.started_at)
