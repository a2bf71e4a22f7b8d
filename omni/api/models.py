"""GET /v1/models and /v1/models/{id}: the catalogue, and whether each model is loaded;
GET /v1/features: what this install can serve (omni/features.py)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from omni import features
from omni.api.current import current_server

bp = Blueprint("models", __name__)


@bp.get("/models")
async def list_models() -> dict[str, Any]:
    models = current_server().models
    return {"object": "list", "data": [models.describe(e) for e in models.entries()]}


@bp.get("/models/<path:model_id>")
async def get_model(model_id: str) -> dict[str, Any]:
    models = current_server().models
    return models.describe(models.find(model_id))


@bp.get("/features")
async def list_features() -> dict[str, Any]:
    return {"object": "list", "data": features.every()}
