"""The transcriptions service over an in-memory log, with a stand-in Whisper: what a
transcription, a failure and a restart write, in order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from omni.errors import OmniError
from omni.events import Append, Appender, MemoryStore, NewEvent, Notifier
from omni.jobs import Audio, TranscribeOptions
from omni.schemas.audio import TranscriptionCreate
from omni.service.transcriptions import TranscriptionsService, Upload

SEGMENTS = [
    {"id": 0, "seek": 0, "start": 0.0, "end": 1.0, "text": " Hello.", "tokens": [1, 2],
     "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0},
    {"id": 1, "seek": 0, "start": 1.0, "end": 2.0, "text": " Bye.", "tokens": [3],
     "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0},
]  # fmt: skip


class FakeTranscriber:
    model_id = "fake-whisper"
    running = 0

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.heard: list[TranscribeOptions] = []

    def decode(self, data: bytes, filename: str) -> Audio:
        return Audio(b"\0" * 4 * 32000, "wav", 2.0)

    async def transcribe(self, audio: Audio, options: TranscribeOptions) -> dict[str, Any]:
        self.heard.append(options)
        if self.failure is not None:
            raise self.failure
        return {"text": "Hello. Bye.", "language": "en", "segments": SEGMENTS}

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
        "transcript.text.delta",
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
