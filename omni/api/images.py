"""POST /v1/images/generations: the images base64-encoded in OpenAI's ImagesResponse, or with
`stream: true` OpenAI's `image_generation.partial_image` events (`partial_images` of each
image, decoded from its latents on the way) and one `image_generation.completed` per image.
The request and each image's seed and size are recorded in the log, not the pictures.
Where mflux cannot run, or its extra is missing, a 501 that says why and what installs it."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from quart import Blueprint
from quart.wrappers import Response

from omni.api import access
from omni.api.admit import admit
from omni.api.gate import owner
from omni.api.sse import event_frame
from omni.errors import OmniError
from omni.ports.images import Drawn, PartialPicture, Picture
from omni.schemas.images import ImageGenerate
from omni.service.images import Generation, usage
from omni.vocabulary import IMAGE_COMPLETED, IMAGE_PARTIAL

bp = Blueprint("images", __name__)


@bp.post("/images/generations")
async def create_image() -> Any:
    server, body = await admit(ImageGenerate, "images")
    generation = await server.images.create(body, owner())
    access.note(id=generation.id)
    if body.stream:
        response = Response(_events(generation), content_type="text/event-stream")
        response.headers["cache-control"] = "no-cache"
        response.timeout = None
    else:
        response = Response(
            json.dumps(await _answer(generation), separators=(",", ":")),
            content_type="application/json",
        )
    response.headers["x-omni-image-id"] = generation.id
    return response


def _described(generation: Generation) -> dict[str, Any]:
    return {
        "background": "opaque",
        "output_format": generation.output_format,
        "quality": generation.quality,
        "size": generation.size,
    }


async def _answer(generation: Generation) -> dict[str, Any]:
    """OpenAI's ImagesResponse, once every image is drawn."""
    data, spent = [], None
    async for piece in generation.pieces:
        if isinstance(piece, Picture):
            data.append({"b64_json": base64.b64encode(piece.data).decode()})
        elif isinstance(piece, Drawn):
            spent = usage(piece.input_tokens, piece.output_tokens)
    return {"created": generation.created, "data": data, **_described(generation),
            "usage": spent}  # fmt: skip


async def _events(generation: Generation) -> AsyncIterator[bytes]:
    described = _described(generation)
    try:
        async for piece in generation.pieces:
            if isinstance(piece, PartialPicture):
                data: dict[str, Any] = {
                    "type": IMAGE_PARTIAL,
                    "b64_json": base64.b64encode(piece.data).decode(),
                    "created_at": int(time.time()),
                    "partial_image_index": piece.index,
                    **described,
                }
            elif isinstance(piece, Picture):
                data = {
                    "type": IMAGE_COMPLETED,
                    "b64_json": base64.b64encode(piece.data).decode(),
                    "created_at": int(time.time()),
                    **described,
                    "usage": usage(piece.input_tokens, piece.output_tokens),
                }
            else:
                continue
            yield event_frame(data)
    except OmniError as exc:  # after the headers: the failure is an event (and in the log)
        yield event_frame({"type": "error", "error": exc.body()["error"]})
