"""POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's multipart upload, its
answer in each response_format or, with stream=true, the log's `transcript.text.*` events as
SSE; GET /v1/audio/transcriptions/<id> reads one back from the log (`?stream=true`: replays
its events, the same bytes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError
from quart import Blueprint, Response, request

from omni import features
from omni.api import access
from omni.api.current import current_server
from omni.api.gate import owner
from omni.api.sse import KEEPALIVE_FRAME, error_frame, frame
from omni.errors import InvalidRequest, OmniError, StoreError
from omni.protocol import transcripts
from omni.schemas.audio import TranscriptionCreate, form_fields
from omni.service.transcriptions import TranscriptionsService, Upload, is_end, sent

bp = Blueprint("transcriptions", __name__)


def _service() -> TranscriptionsService:
    server = current_server()
    server.lifecycle.refuse_if_closing()
    return server.transcriptions


@bp.post("/audio/transcriptions")
async def create_transcription() -> Any:
    return await _create("transcribe")


@bp.post("/audio/translations")
async def create_translation() -> Any:
    return await _create("translate")


async def _create(task: str) -> Any:
    features.require("transcription")
    service = _service()
    form, files = await request.form, await request.files
    try:
        body = TranscriptionCreate.model_validate(form_fields(form))
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise InvalidRequest(f"Invalid value for '{param}': {err['msg']}", param=param) from None
    upload = files.get("file")
    if upload is None:
        raise InvalidRequest("'file' is required: the audio to transcribe.", param="file")
    data = upload.read()
    if not data:
        raise InvalidRequest("'file' is empty.", param="file")
    tid, job = await service.create(body, Upload(data, upload.filename or "audio", task), owner())
    access.note(id=tid)
    if body.stream:
        return _stream(service, tid, creator=True)
    try:
        outcome = await asyncio.shield(job)  # its record is whole, whoever leaves
    except asyncio.CancelledError:  # the client went away: the model stops after its window
        service.cancel(tid)
        raise
    if isinstance(outcome, OmniError):
        raise outcome
    return _answer(outcome, body, outcome["duration"], task)


def _answer(result: dict[str, Any], body: TranscriptionCreate, seconds: float, task: str) -> Any:
    content, content_type = transcripts.answer(
        result, body.response_format, seconds, task, body.words
    )
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return Response(text, content_type=content_type)


def _stream(
    service: TranscriptionsService, tid: str, after: int = -1, creator: bool = False
) -> Response:
    """The events after `after` as SSE; the `creator`'s leaving cancels the transcription
    (a replay's does not)."""

    async def body() -> AsyncIterator[bytes]:
        seq, ended = after, False
        try:
            async for event in service.events(tid, after):
                if event is None:
                    yield KEEPALIVE_FRAME
                elif sent(event):
                    seq = event.seq
                    ended = is_end(event)
                    yield frame(event.type, event.data, event.seq)
        except StoreError as exc:  # the log cannot be read (its file is gone): say so, end
            yield error_frame(exc, seq + 1)
        finally:
            if creator and not ended:
                service.cancel(tid)

    response = Response(body(), content_type="text/event-stream")
    response.headers["cache-control"] = "no-cache"
    response.timeout = None
    return response


@bp.get("/audio/transcriptions/<tid>")
async def retrieve_transcription(tid: str) -> Any:
    """A transcription from the log: verbose_json (or `?response_format=`), or its events
    again with `?stream=true` (after `?starting_after=<seq>`)."""
    service = _service()
    recorded = await service.request(tid, owner())
    if request.args.get("stream", "").lower() == "true":
        after = request.args.get("starting_after", "-1")
        if not after.lstrip("-").isdigit():
            raise InvalidRequest("'starting_after' must be an integer.", param="starting_after")
        return _stream(service, tid, int(after))
    stored = await service.stored(tid)
    if stored is None:
        raise InvalidRequest(f"Transcription '{tid}' is still in progress.", code="in_progress")
    if isinstance(stored, OmniError):
        raise stored
    result, seconds = stored
    fields = {**recorded["body"], "stream": False}
    fields["response_format"] = request.args.get("response_format", "verbose_json")
    try:
        body = TranscriptionCreate.model_validate(fields)
    except ValidationError:
        raise InvalidRequest("Unknown 'response_format'.", param="response_format") from None
    return _answer(result, body, seconds, recorded["task"])
