"""POST /v1/audio/speech: the audio's bytes as the model speaks them (OpenAI's default), or
`stream_format: "sse"`'s `speech.audio.delta` events (base64 pieces) and `speech.audio.done`
(usage). The request and the audio's length are recorded in the log, not the audio."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from quart import Blueprint
from quart.wrappers import Response

from omni.api import access
from omni.api.admit import admit
from omni.api.gate import owner
from omni.api.sse import event_frame
from omni.ports.speech import Spoken
from omni.schemas.speech import SpeechCreate
from omni.service.speech import Speech, usage
from omni.vocabulary import SPEECH_AUDIO_DELTA, SPEECH_AUDIO_DONE

bp = Blueprint("speech", __name__)


@bp.post("/audio/speech")
async def create_speech() -> Any:
    server, body = await admit(SpeechCreate, "speech")
    speech = await server.speech.create(body, owner())
    access.note(id=speech.id)
    if body.stream_format == "sse":
        response = Response(_events(speech), content_type="text/event-stream")
        response.headers["cache-control"] = "no-cache"
    else:
        response = Response(_audio(speech), content_type=speech.media_type)
    response.headers["x-omni-speech-id"] = speech.id
    response.timeout = None
    return response


async def _audio(speech: Speech) -> AsyncIterator[bytes]:
    # Closed with this body, however it ends: a client that leaves stops the model.
    async with aclosing(speech.pieces):
        async for piece in speech.pieces:
            if isinstance(piece, bytes):
                yield piece


async def _events(speech: Speech) -> AsyncIterator[bytes]:
    async with aclosing(speech.pieces):
        async for piece in speech.pieces:
            if isinstance(piece, Spoken):
                data: dict[str, Any] = {"type": SPEECH_AUDIO_DONE, "usage": usage(piece)}
            else:
                data = {"type": SPEECH_AUDIO_DELTA, "audio": base64.b64encode(piece).decode()}
            yield event_frame(data)
