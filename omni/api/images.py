"""POST /v1/images/generations: image generation through mflux, which runs on macOS only
(omni/features.py). Elsewhere, and where its extra is missing, a 501 that says why and what
installs it; no engine serves it yet, so where it could run the answer is a 404 naming that."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from omni import features
from omni.errors import ModelNotFound
from omni.schemas.images import ImageGenerate
from omni.schemas.responses import parse_body

bp = Blueprint("images", __name__)


@bp.post("/images/generations")
async def create_image() -> Any:
    features.require("images")
    body = parse_body(await request.get_data(), ImageGenerate)
    raise ModelNotFound(
        f"No image generation model is served here (asked for '{body.model}').", param="model"
    )
