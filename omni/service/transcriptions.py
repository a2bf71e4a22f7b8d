"""Speech to text over the event log. Each transcription (or translation) is a stream
`trsc-X`: `transcription.in_progress` once accepted (its request on `trsc-X/request`: model,
task, options, the audio's size, sha256 and duration, never the audio), then the text's
`transcript.text.delta` events, its segments, and `transcript.text.done` (or
`transcription.failed`). A streamed request follows the log as every stream does; a replay
reads the same rows."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from omni.errors import SERVER_ERROR, NotFound, OmniError, internal
from omni.events import Append, Appender, EventLog, NewEvent, Notifier, StoredEvent
from omni.events.follow import follow
from omni.ids import new_id
from omni.metrics import UNREAD, Metrics
from omni.ports.model import Answer
from omni.ports.transcription import Audio, Heard, TranscribeOptions, Transcriber, Transcript
from omni.protocol import transcripts
from omni.schemas.audio import TranscriptionCreate
from omni.service.leasing import Leasing
from omni.service.modality import LeftOpen, ModelRequests, now_ms
from omni.service.models import LOAD_MS
from omni.service.ownership import visible
from omni.service.streams import dumps, request_stream
from omni.settings import ServerSettings
from omni.vocabulary import (
    ACCEPTED,
    ID_PREFIXES,
    TRANSCRIPT_DELTA,
    TRANSCRIPT_DONE,
    TRANSCRIPTION,
    TRANSCRIPTION_ENDS,
    TRANSCRIPTION_FAILED,
    TRANSCRIPTION_IN_PROGRESS,
    TRANSCRIPTION_SEGMENTS,
    TRANSCRIPTION_WINDOW,
)

RESTARTED = "The server restarted before this transcription was done."
GONE = "The client went away before its transcription was done."


class TranscriberSource(Protocol):
    """What the service asks of the model pool (omni.service.models.Models)."""

    def use_transcriber(self, name: str | None) -> AbstractAsyncContextManager[Transcriber]:
        """The transcription model `name` names (None: the default), loaded and kept loaded
        while in use; a ModelNotFound, or an InvalidRequest for a model of another kind."""
        ...


@dataclass(frozen=True)
class Upload:
    data: bytes
    filename: str
    task: str  # "transcribe" or "translate"


def is_end(event: StoredEvent) -> bool:
    return event.type in TRANSCRIPTION_ENDS


def sent(event: StoredEvent) -> bool:
    """Whether a stream sends this event (the text's, and a failure), not Omni's own."""
    return event.type in (TRANSCRIPT_DELTA, TRANSCRIPT_DONE, TRANSCRIPTION_FAILED)


class TranscriptionsService(ModelRequests[TranscriberSource]):
    kinds = (TRANSCRIPTION,)
    left_open = LeftOpen.failing(
        TRANSCRIPTION_IN_PROGRESS,
        TRANSCRIPTION_ENDS,
        TRANSCRIPTION_FAILED,
        RESTARTED,
        "transcriptions",
    )

    def __init__(
        self,
        store: EventLog,
        appender: Appender,
        notifier: Notifier,
        models: TranscriberSource,
        *,
        leasing: Leasing | None = None,
        keepalive: float = ServerSettings.keepalive,
        metrics: Metrics = UNREAD,
    ):
        super().__init__(store, appender, models, leasing=leasing, metrics=metrics)
        self.notifier = notifier
        self.keepalive = keepalive
        self._jobs: set[asyncio.Task[Any]] = set()
        # The transcriptions under way (None: being sent to the model).
        self._answers: dict[str, Answer[Heard | Transcript] | None] = {}
        self._cancelled: set[str] = set()  # asked to stop before the model began them

    async def create(
        self, body: TranscriptionCreate, upload: Upload, owner: str | None = None
    ) -> tuple[str, asyncio.Task[dict[str, Any] | OmniError]]:
        """Accept `upload` (a 400 for what is not audio, before anything is written) and
        transcribe it in a task of its own: its id, and the task (the transcript with the
        audio's `duration`, or the failure the log recorded, as a value). A streamed
        request follows the log instead."""
        accepted: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        job = asyncio.create_task(self._job(body, upload, owner, accepted))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return await accepted, job

    async def _job(
        self,
        body: TranscriptionCreate,
        upload: Upload,
        owner: str | None,
        accepted: asyncio.Future[str],
    ) -> dict[str, Any] | OmniError:
        queued_at = now_ms()
        try:
            async with self.models.use_transcriber(body.model) as model:
                decoded = await asyncio.to_thread(model.decode, upload.data, upload.filename)
                tid = new_id("trsc").replace("trsc_", ID_PREFIXES[TRANSCRIPTION])
                await self.leasing.claim(tid)
                try:
                    await self._accept(tid, body, upload, decoded, model.model_id, owner, queued_at)
                    accepted.set_result(tid)
                    hearing = self._hear(tid, body, upload.task, decoded, model)
                    return await self._observed(upload.task, hearing)
                finally:
                    await self.leasing.release([tid])
        except Exception as exc:  # noqa: BLE001 - before acceptance: the request's error
            if not accepted.done():  # raised to the request, rendered (and logged) there
                accepted.set_exception(exc)
                return exc if isinstance(exc, OmniError) else OmniError(SERVER_ERROR)
            return internal(exc, "a transcription")

    async def _accept(
        self,
        tid: str,
        body: TranscriptionCreate,
        upload: Upload,
        decoded: Audio,
        model_id: str,
        owner: str | None,
        queued_at: int,
    ) -> None:
        audio = {
            "filename": upload.filename,
            "bytes": len(upload.data),
            "sha256": hashlib.sha256(upload.data).hexdigest(),
            "format": decoded.format,
            "seconds": round(decoded.seconds, 3),
        }
        request = {
            "kind": TRANSCRIPTION,
            "task": upload.task,
            "model": model_id,
            "body": body.model_dump(mode="json"),
            "audio": audio,
            "owner": owner,
            "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
            "created": queued_at // 1000,
        }
        opening = {"id": tid, "model": model_id, "task": upload.task, "seconds": audio["seconds"]}
        await self.appender.append(
            Append(request_stream(tid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(tid, 0, [NewEvent(TRANSCRIPTION_IN_PROGRESS, dumps(opening))]),
        )

    async def _observed(
        self, task: str, hearing: Awaitable[tuple[dict[str, Any] | OmniError, float]]
    ) -> dict[str, Any] | OmniError:
        """The outcome of `hearing` (_hear), and its figures for /metrics."""
        started = time.perf_counter()
        outcome, heard = await hearing
        status = "completed" if isinstance(outcome, dict) else "failed"
        if isinstance(outcome, OmniError) and outcome.code == "cancelled":
            status = "cancelled"
        m = self.metrics
        m.transcriptions.labels(task, status).inc()
        m.transcription_audio.labels(task).inc(heard)
        m.transcription_seconds.labels(task).observe(time.perf_counter() - started)
        return outcome

    async def _hear(
        self,
        tid: str,
        body: TranscriptionCreate,
        task: str,
        decoded: Audio,
        model: Transcriber,
    ) -> tuple[dict[str, Any] | OmniError, float]:
        """Each window's text recorded as the model hears it, then the segments and the
        done event; a failure, or a cancel (its client went away), ends it instead. The
        transcript (or the failure, as a value), and the seconds of audio the model heard."""
        options = TranscribeOptions(
            language=body.language,
            prompt=body.prompt,
            temperature=body.temperature,
            translate=task == "translate",
            words=body.words,
        )
        started_at, seq, said, heard_s = now_ms(), 1, False, 0.0
        end: Transcript | None = None
        answer: Answer[Heard | Transcript] | None = None
        self._answers[tid] = None
        try:
            answer = self._answers[tid] = await model.transcribe(decoded, options)
            if tid in self._cancelled:
                answer.cancel()
            async for piece in answer:
                if isinstance(piece, Transcript):
                    end = piece
                    break
                heard = {"window": piece.window, "seconds": round(piece.seconds, 3),
                         "segments": len(piece.segments)}  # fmt: skip
                events = [NewEvent(TRANSCRIPTION_WINDOW, dumps(heard))]
                for delta in transcripts.window_deltas(piece.segments, said):
                    events.append(NewEvent(TRANSCRIPT_DELTA, dumps(delta)))
                    said = True
                await self.appender.append(Append(tid, seq, events))
                seq += len(events)
                heard_s = piece.seconds
        except Exception as exc:  # noqa: BLE001 - recorded, and handed back as a value
            failure = internal(exc, f"transcription {tid}")
            return await self._fail(tid, seq, failure, started_at), heard_s
        finally:
            self._answers.pop(tid, None)
            self._cancelled.discard(tid)
            if answer is not None:
                await answer.aclose()  # over already, but where this task was cancelled
        if end is None:
            failure = OmniError("no transcript came")
            return await self._fail(tid, seq, failure, started_at), heard_s
        if end.cancelled:
            failure = OmniError(GONE, code="cancelled")
            ended = await self._fail(tid, seq, failure, started_at, windows=end.windows)
            return ended, heard_s
        result, seconds = end.result, decoded.seconds
        heard_all: dict[str, Any] = {
            "language": result.get("language"),
            "duration": round(seconds, 3),
            "segments": result["segments"],
            "windows": end.windows,
            "timings": self._timings(started_at),
        }
        events = [NewEvent(TRANSCRIPTION_SEGMENTS, dumps(heard_all))]
        events.append(NewEvent(TRANSCRIPT_DONE, dumps(transcripts.done(result, seconds))))
        await self.appender.append(Append(tid, seq, events))
        return {**result, "duration": seconds}, seconds

    async def _fail(
        self, tid: str, seq: int, failure: OmniError, started_at: int, **fields: Any
    ) -> OmniError:
        data = {"id": tid, **failure.body(), **fields, "timings": self._timings(started_at)}
        await self.appender.append(Append(tid, seq, [NewEvent(TRANSCRIPTION_FAILED, dumps(data))]))
        return failure

    def cancel(self, tid: str) -> None:
        """Stop a transcription under way after the window the model is hearing (its client
        went away); it ends `transcription.failed` with the code `cancelled`."""
        if tid not in self._answers:
            return  # over already
        if (answer := self._answers[tid]) is None:
            self._cancelled.add(tid)  # the model is being sent it
        else:
            answer.cancel()

    @staticmethod
    def _timings(started_at: int) -> dict[str, int]:
        return {"started_at": started_at, "finished_at": now_ms()}

    # --- reading ----------------------------------------------------------------------

    def events(self, tid: str, after: int = -1) -> AsyncGenerator[StoredEvent | None, None]:
        """The transcription's events after `after`, live until its end (None: keep-alive)."""
        return follow(self.store, self.notifier, tid, after, is_end, self.keepalive)

    async def request(self, tid: str, owner: str | None) -> dict[str, Any]:
        """Its accepted request; a 404 for an id that is not a transcription of `owner`'s."""
        rows = await self.store.read(request_stream(tid), limit=1) if _ours(tid) else []
        found = json.loads(rows[0].data) if rows and rows[0].type == ACCEPTED else {}
        if found.get("kind") != TRANSCRIPTION or not visible(found, owner):
            raise NotFound(f"No transcription found with id '{tid}'.", param="id")
        return found

    async def stored(self, tid: str) -> tuple[dict[str, Any], float] | OmniError | None:
        """Its transcript and the audio's seconds from the log, its failure, or None while
        it is still being heard."""
        result: dict[str, Any] = {}
        for event in await self.store.read(tid):
            data = json.loads(event.data)
            if event.type == TRANSCRIPTION_SEGMENTS:
                result = {"language": data["language"], "segments": data["segments"]}
                seconds = float(data["duration"])
            elif event.type == TRANSCRIPT_DONE:
                return result, seconds
            elif event.type == TRANSCRIPTION_FAILED:
                return OmniError(data["error"]["message"])
        return None

    async def close(self) -> None:
        """Let the transcriptions under way end (their model is closed after this)."""
        if self._jobs:
            await asyncio.wait(list(self._jobs), timeout=30)


def _ours(tid: str) -> bool:
    return tid.startswith(ID_PREFIXES[TRANSCRIPTION])
