"""The transcriptions service over an in-memory log, with a stand-in Whisper: what a
transcription, a failure and a restart write, in order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from omni.errors import OmniError
from omni.events import Append, Appender, MemoryStore, NewEvent, Notifier
from omni.ports.transcription import Audio, Heard, TranscribeOptions, Transcript
from omni.schemas.audio import TranscriptionCreate
from omni.service.transcriptions import TranscriptionsService, Upload

SEGMENTS = [
    {"id": 0, "seek": 0, "start": 0.0, "end": 1.0, "text": " Hello.", "tokens": [1, 2],
     "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0},
    {"id": 1, "seek": 0, "start": 1.0, "end": 2.0, "text": " Bye.", "tokens": [3],
     "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0},
]  # fmt: skip


class Windows:
    """A stand-in Whisper's answer: one window a segment (each after the first once `go` is
    set), then the transcript; a cancel stops it after the window it is in."""

    def __init__(self, failure: Exception | None, go: asyncio.Event) -> None:
        self.failure, self.sent, self.stop, self.go = failure, 0, False, go

    def __aiter__(self) -> Windows:
        return self

    async def __anext__(self) -> Heard | Transcript:
        if self.failure is not None:
            raise self.failure
        if self.sent:
            await self.go.wait()
        if self.sent < len(SEGMENTS) and not self.stop:
            self.sent += 1
            return Heard(self.sent - 1, SEGMENTS[self.sent - 1 : self.sent], float(self.sent))
        if self.sent > len(SEGMENTS):
            raise StopAsyncIteration
        heard = SEGMENTS[: self.sent]
        self.sent = len(SEGMENTS) + 1
        result = {"text": "Hello. Bye.", "language": "en", "segments": heard}
        return Transcript(result, len(heard), self.stop)

    def cancel(self) -> None:
        self.stop = True

    async def aclose(self) -> None:
        pass


class FakeTranscriber:
    model_id = "fake-whisper"
    running = 0

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.heard: list[TranscribeOptions] = []
        self.answers: list[Windows] = []
        self.go = asyncio.Event()
        self.go.set()

    def decode(self, data: bytes, filename: str) -> Audio:
        return Audio(b"\0" * 4 * 32000, "wav", 2.0)

    async def transcribe(self, audio: Audio, options: TranscribeOptions) -> Windows:
        self.heard.append(options)
        self.answers.append(Windows(self.failure, self.go))
        return self.answers[-1]

    def close(self) -> None:
        pass


class FakeModels:
    def __init__(self, fake: FakeTranscriber) -> None:
        self.fake = fake

    @asynccontextmanager
    async def use_transcriber(self, name: str | None) -> AsyncIterator[FakeTranscriber]:
        yield self.fake


@pytest.fixture
async def setup() -> AsyncIterator[tuple[TranscriptionsService, MemoryStore, FakeTranscriber]]:
    store, fake, notifier = MemoryStore(), FakeTranscriber(), Notifier()
    appender = Appender(store, notifier)
    appender.start()
    yield TranscriptionsService(store, appender, notifier, FakeModels(fake)), store, fake
    await appender.stop()


async def test_a_transcription_is_a_stream_of_its_text(setup) -> None:
    service, store, fake = setup
    body = TranscriptionCreate(language="en", prompt="Greetings", timestamp_granularities=["word"])
    tid, job = await service.create(body, Upload(b"RIFF", "hi.wav", "translate"), "alice")
    result = await job
    assert isinstance(result, dict) and result["duration"] == 2.0
    assert fake.heard[-1] == TranscribeOptions("en", "Greetings", 0.0, True, True)
    assert [e.type for e in await store.read(tid)] == [
        "transcription.in_progress",
        "transcription.window",
        "transcript.text.delta",
        "transcription.window",
        "transcript.text.delta",
        "transcription.segments",
        "transcript.text.done",
    ]
    (accepted,) = await store.read(f"{tid}/request")
    request = json.loads(accepted.data)
    assert (request["kind"], request["task"], request["owner"]) == ("transcription", "translate",
                                                                     "alice")  # fmt: skip
    assert request["audio"]["bytes"] == 4 and request["audio"]["seconds"] == 2.0
    replayed = [e async for e in service.events(tid) if e is not None]
    assert json.loads(replayed[-1].data)["text"] == "Hello. Bye."
    assert await service.request(tid, "alice") == request
    with pytest.raises(OmniError) as other:
        await service.request(tid, "bob")  # another key's: not found, as any unknown id
    assert other.value.status == 404


async def test_a_cancel_stops_it_after_its_window_and_says_so(setup) -> None:
    service, store, fake = setup
    fake.go.clear()  # the second window waits
    tid, job = await service.create(TranscriptionCreate(), Upload(b"x", "a.wav", "transcribe"))
    async for event in service.events(tid):
        if event is not None and event.type == "transcript.text.delta":
            break
    service.cancel(tid)
    fake.go.set()
    failure = await job
    assert isinstance(failure, OmniError) and failure.code == "cancelled"
    events = await store.read(tid)
    assert [e.type for e in events] == [
        "transcription.in_progress",
        "transcription.window",
        "transcript.text.delta",
        "transcription.failed",
    ]
    assert json.loads(events[-1].data)["windows"] == 1 < len(SEGMENTS)
    service.cancel(tid)  # over: nothing to stop


async def test_a_failure_is_recorded_and_handed_back(setup) -> None:
    service, store, fake = setup
    fake.failure = OmniError("the transcription model failed: boom")
    tid, job = await service.create(TranscriptionCreate(), Upload(b"x", "a.wav", "transcribe"))
    failure = await job
    assert isinstance(failure, OmniError) and "boom" in failure.message
    end = (await store.read(tid))[-1]
    assert end.type == "transcription.failed"
    assert isinstance(await service.stored(tid), OmniError)


async def test_recovery_ends_what_a_crash_left_open(setup) -> None:
    service, store, _ = setup
    await service.appender.append(
        Append("trsc-crashed", 0, [NewEvent("transcription.in_progress", "{}")])
    )
    assert await service.recover() == 1
    assert [e.type for e in await store.read("trsc-crashed")][-1] == "transcription.failed"
    assert await service.recover() == 0
