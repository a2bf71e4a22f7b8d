"""Speech over the event log. Each request is a stream `spch-X`: `speech.in_progress` when
accepted (its request on `spch-X/request`: model, voice, format, the input as a response
records its input, owner), then `speech.completed` (the audio's duration, samples and bytes,
usage, timings) or `speech.failed` (code `cancelled` where the client went away: once the
model stopped, with how much it had spoken). The audio is the answer, not the record: never
written."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from omni.errors import InvalidRequest, OmniError, internal
from omni.events import Append, Appender, EventLog, NewEvent
from omni.ids import new_id
from omni.metrics import UNREAD, Metrics
from omni.ports.model import Answer
from omni.ports.speech import Speaker, SpeechOrder, Spoken
from omni.schemas.speech import MEDIA_TYPES, SpeechCreate
from omni.service.leasing import Leasing
from omni.service.modality import LeftOpen, ModelRequests, error_body, now_ms, submit_end
from omni.service.models import LOAD_MS
from omni.service.streams import dumps, request_stream
from omni.vocabulary import (
    ACCEPTED,
    ID_PREFIXES,
    SPEECH,
    SPEECH_COMPLETED,
    SPEECH_ENDS,
    SPEECH_FAILED,
    SPEECH_IN_PROGRESS,
)

RESTARTED = "The server restarted before this speech was spoken."
GONE = "The client went away before its speech was spoken."
log = logging.getLogger(__name__)


class SpeakerSource(Protocol):
    """What the service asks of the model pool (omni.service.models.Models)."""

    def use_speaker(self, name: str | None) -> AbstractAsyncContextManager[Speaker]:
        """The speech model `name` names, loaded and kept loaded while the request is taken
        in; a ModelNotFound, or an InvalidRequest for a model of another kind."""
        ...


@dataclass(frozen=True)
class Speech:
    """An accepted speech request: its id, the answer's media type, and its audio's pieces
    (bytes), then one Spoken."""

    id: str
    model: str
    media_type: str
    pieces: AsyncGenerator[bytes | Spoken, None]


@dataclass(frozen=True)
class _Speaking:
    """A speech under way: its stream, its model, the model's answer and its timings."""

    sid: str
    model_id: str
    pieces: Answer[bytes | Spoken]
    timings: dict[str, int]


def voice_for(body: SpeechCreate, speaker: Speaker) -> str | None:
    """The voice to speak with: the one asked for, which the model must have, else its
    default; a 400 naming the model's voices."""
    caps = speaker.capabilities
    if body.voice is None:
        return caps.default_voice
    if caps.voices and body.voice not in caps.voices:
        shown = ", ".join(caps.voices[:20]) + (", …" if len(caps.voices) > 20 else "")
        raise InvalidRequest(
            f"The voice '{body.voice}' is not one of model '{speaker.model_id}''s voices: {shown}.",
            param="voice",
        )
    return body.voice


class SpeechService(ModelRequests[SpeakerSource]):
    kinds = (SPEECH,)
    left_open = LeftOpen.failing(
        SPEECH_IN_PROGRESS, SPEECH_ENDS, SPEECH_FAILED, RESTARTED, "speech requests"
    )

    def __init__(
        self,
        store: EventLog,
        appender: Appender,
        models: SpeakerSource,
        *,
        leasing: Leasing | None = None,
        metrics: Metrics = UNREAD,
    ):
        super().__init__(store, appender, models, leasing=leasing, metrics=metrics)
        # The requests whose client went away, ending once their model stopped.
        self._stopping: dict[str, asyncio.Task[None]] = {}

    async def create(self, body: SpeechCreate, owner: str | None = None) -> Speech:
        """`owner`'s speech, accepted and its first audio spoken (so that a model's failure
        is still an error the client reads, not a cut file)."""
        queued_at = now_ms()
        async with self.models.use_speaker(body.model) as speaker:
            voice = voice_for(body, speaker)
            if body.instructions and not speaker.capabilities.instructions:
                raise InvalidRequest(
                    f"Model '{speaker.model_id}' does not take instructions on how to speak.",
                    param="instructions",
                )
            sid = new_id("spch").replace("spch_", ID_PREFIXES[SPEECH])
            await self.leasing.claim(sid)
            try:
                await self._accept(sid, body, speaker.model_id, voice, owner, queued_at)
                timings = {"queued_at": queued_at, "started_at": now_ms()}
                order = SpeechOrder(
                    body.input, voice, body.response_format, body.speed, body.instructions
                )
                pieces = await speaker.speak(order)
                speaking = _Speaking(sid, speaker.model_id, pieces, timings)
                first = await self._first(speaking)
            except BaseException:
                if sid not in self._stopping:  # else it lets go once it has ended
                    await self.leasing.release([sid])
                raise
        rest = self._rest(speaking, first)
        return Speech(sid, speaker.model_id, MEDIA_TYPES[body.response_format], rest)

    async def _first(self, s: _Speaking) -> bytes | Spoken:
        try:
            return await anext(s.pieces)
        except asyncio.CancelledError:
            self._stop(s, 0)
            raise
        except Exception as exc:
            failure = internal(exc, f"speech {s.sid}")
            await self._end(s, SPEECH_FAILED, failure.body())
            raise failure from None

    async def _rest(
        self, s: _Speaking, first: bytes | Spoken
    ) -> AsyncGenerator[bytes | Spoken, None]:
        """The pieces from the first on; the log's ending once the last is spoken, or once
        the model fails or the client goes (after the headers: the file is cut short)."""
        sent, piece, stopping = 0, first, False
        try:
            while not isinstance(piece, Spoken):
                sent += len(piece)
                yield piece
                piece = await anext(s.pieces)
            done = {
                "duration_s": round(piece.seconds, 3),
                "samples": piece.samples,
                "sample_rate": piece.sample_rate,
                "bytes": sent,
                "segments": piece.segments,
                "usage": usage(piece),
            }
            await self._end(s, SPEECH_COMPLETED, done)
            yield piece
        except (asyncio.CancelledError, GeneratorExit):
            stopping = True
            self._stop(s, sent)
            raise
        except Exception as exc:
            log.warning("speech %s failed after its first audio: %s", s.sid, exc)
            failure = internal(exc, f"speech {s.sid}")
            await self._end(s, SPEECH_FAILED, failure.body())
        finally:
            if not stopping:  # else _stopped() ends it
                await s.pieces.aclose()
                await self.leasing.release([s.sid])

    def _stop(self, s: _Speaking, sent: int) -> None:
        """The client went away: stop the model after its segment, and end the log once it
        has (in a task of its own: the request's is being cancelled)."""
        s.pieces.cancel()
        task = asyncio.get_running_loop().create_task(self._stopped(s, sent))
        self._stopping[s.sid] = task
        task.add_done_callback(lambda _: self._stopping.pop(s.sid, None))

    async def _stopped(self, s: _Speaking, sent: int) -> None:
        """`speech.failed` (code `cancelled`) with how much the model spoke before it
        stopped: the pieces after the client left are read to the model's last."""
        fields: dict[str, Any] = {**error_body(GONE, "cancelled"), "bytes": sent}
        try:
            async for piece in s.pieces:
                if isinstance(piece, Spoken):
                    fields["spoken"] = {"segments": piece.segments, "samples": piece.samples,
                                        "duration_s": round(piece.seconds, 3),
                                        "stopped": piece.cancelled}  # fmt: skip
        except OmniError as exc:  # the model failed, or its process went, meanwhile
            log.warning("speech %s, cancelled, then: %s", s.sid, exc)
        finally:
            await s.pieces.aclose()
            try:
                await self._end(s, SPEECH_FAILED, fields)
            finally:
                await self.leasing.release([s.sid])

    async def _accept(
        self,
        sid: str,
        body: SpeechCreate,
        model_id: str,
        voice: str | None,
        owner: str | None,
        queued_at: int,
    ) -> None:
        request = {
            "kind": SPEECH,
            "model": model_id,
            "body": body.model_dump(mode="json"),
            "voice": voice,
            "input_chars": len(body.input),
            "owner": owner,
            "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
            "created": queued_at // 1000,
        }
        opening = {"id": sid, "model": model_id, "voice": voice,
                   "response_format": body.response_format}  # fmt: skip
        await self.appender.append(
            Append(request_stream(sid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(sid, 0, [NewEvent(SPEECH_IN_PROGRESS, dumps(opening))]),
        )

    def _end(self, s: _Speaking, type_: str, fields: dict[str, Any]) -> asyncio.Future[Any]:
        """The ending's append (and its metrics)."""
        if type_ == SPEECH_COMPLETED:
            status, spoken = "completed", float(fields["duration_s"])
        else:
            cancelled = fields["error"]["code"] == "cancelled"
            status = "cancelled" if cancelled else "failed"
            spoken = float(fields.get("spoken", {}).get("duration_s", 0.0))
        self.metrics.speeches.labels(status).inc()
        self.metrics.speech_audio.inc(spoken)
        self.metrics.speech_seconds.observe((now_ms() - s.timings["started_at"]) / 1000)
        return submit_end(self.appender, s.sid, 1, type_, s.model_id, s.timings, fields)

    async def close(self) -> None:
        """Let the cancelled requests' models stop and their endings be written."""
        if self._stopping:
            await asyncio.wait(list(self._stopping.values()), timeout=30)


def usage(spoken: Spoken) -> dict[str, int]:
    """OpenAI's usage of a speech: the model's input tokens; it counts no output tokens."""
    return {"input_tokens": spoken.input_tokens, "output_tokens": 0,
            "total_tokens": spoken.input_tokens}  # fmt: skip
