"""How a model-process endpoint (embeddings, speech, image generation, transcription) takes a
request in, before its service runs anything: its feature can run here, its body is valid,
and the server takes new work."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from omni import features
from omni.api.body import body_bytes
from omni.api.current import current_server
from omni.schemas.body import parse_body
from omni.server import Server

Body = TypeVar("Body", bound=BaseModel)


async def admit(schema: type[Body], feature: str | None = None) -> tuple[Server, Body]:
    """The server and the request's body as `schema` validates it: a 501 where `feature`
    cannot run here, a 400 for a body that is not valid, a 503 once the server is stopping."""
    if feature is not None:
        features.require(feature)
    body: Body = parse_body(await body_bytes(), schema)
    server = current_server()
    server.lifecycle.refuse_if_closing()
    return server, body
