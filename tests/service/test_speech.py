"""The speech service on the in-memory log with a scripted speaker: the events each request
leaves however it ends (spoken, the model failing before or after its first audio, the client
leaving midway, a crash), and the voice refused before anything is written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from omni.errors import SERVER_ERROR, InvalidRequest, OmniError
from omni.events import Append, Appender, MemoryStore, NewEvent, Notifier, StoredEvent
from omni.ports.speech import SpeechCapabilities, SpeechOrder, Spoken
from omni.schemas.speech import SpeechCreate
from omni.service.speech import SpeechService


class Script:
    """A scripted speaker's answer: each item a piece of the file, an exception raised there,
    or None (wait until cancelled); then a Spoken of 24,000 samples, or, cancelled, of the
    pieces spoken so far (1,000 samples each)."""

    def __init__(self, script: list[bytes | Exception | None]) -> None:
        self.script, self.at, self.over = list(script), 0, False
        self.stopped = asyncio.Event()

    def __aiter__(self) -> Script:
        return self

    async def __anext__(self) -> bytes | Spoken:
        if self.over:
            raise StopAsyncIteration
        if self.at < len(self.script) and not self.stopped.is_set():
            item = self.script[self.at]
            if isinstance(item, Exception):
                self.over = True
                raise item
            if item is None:
                await self.stopped.wait()
            else:
                self.at += 1
                return item
        self.over = True
        if self.stopped.is_set():
            return Spoken(1000 * self.at, 24000, 7, self.at, True)
        return Spoken(24000, 24000, 7, self.at)

    def cancel(self) -> None:
        self.stopped.set()

    async def aclose(self) -> None:
        self.cancel()
        self.over = True


class ScriptedSpeaker:
    """Speaks its script (Script)."""

    model_id = "scripted-tts"
    capabilities = SpeechCapabilities(24000, ("af_one", "bf_two"), "af_one", False)
    running = 0

    def __init__(self) -> None:
        self.script: list[bytes | Exception | None] = [b"RIFF", b"data"]
        self.asked: list[tuple[str, str | None]] = []

    async def speak(self, order: SpeechOrder) -> Script:
        self.asked.append((order.text, order.voice))
        return Script(self.script)

    def close(self) -> None:
        pass


class OneSpeaker:
    def __init__(self, speaker: ScriptedSpeaker) -> None:
        self.speaker = speaker

    @asynccontextmanager
    async def use_speaker(self, name: str | None) -> AsyncIterator[ScriptedSpeaker]:
        yield self.speaker


@pytest.fixture
async def setup() -> AsyncIterator[tuple[SpeechService, MemoryStore, ScriptedSpeaker]]:
    store, speaker = MemoryStore(), ScriptedSpeaker()
    appender = Appender(store, Notifier())
    appender.start()
    yield SpeechService(store, appender, OneSpeaker(speaker)), store, speaker
    await appender.stop()


def logged(store: MemoryStore) -> list[StoredEvent]:
    """Every event in the log, in position order."""
    return list(store._events.values())


def body(**fields: Any) -> SpeechCreate:
    return SpeechCreate.model_validate({"model": "scripted-tts", "input": "Hello.", **fields})


async def spoken(service: SpeechService, **fields: Any) -> tuple[str, list[bytes | Spoken]]:
    speech = await service.create(body(**fields), owner="alice")
    return speech.id, [piece async for piece in speech.pieces]


async def stream(store: MemoryStore, sid: str) -> list[StoredEvent]:
    return list(await store.read(sid))


async def test_a_speech_spoken_whole_is_recorded_without_its_audio(setup) -> None:
    service, store, speaker = setup
    sid, pieces = await spoken(service, response_format="wav", voice={"id": "af_one"})
    assert sid.startswith("spch-") and pieces[:2] == [b"RIFF", b"data"]
    assert isinstance(pieces[-1], Spoken) and speaker.asked == [("Hello.", "af_one")]
    (request,) = await store.read(f"{sid}/request")
    accepted = json.loads(request.data)
    assert (accepted["kind"], accepted["voice"], accepted["owner"]) == ("speech", "af_one", "alice")
    assert accepted["body"]["input"] == "Hello." and accepted["input_chars"] == 6
    events = await stream(store, sid)
    assert [e.type for e in events] == ["speech.in_progress", "speech.completed"]
    end = json.loads(events[-1].data)
    assert (end["duration_s"], end["samples"], end["bytes"]) == (1.0, 24000, 8)
    assert end["usage"] == {"input_tokens": 7, "output_tokens": 0, "total_tokens": 7}
    assert "RIFF" not in events[-1].data


async def test_a_voice_the_model_lacks_or_instructions_it_takes_not_write_nothing(setup) -> None:
    service, store, _ = setup
    with pytest.raises(InvalidRequest, match="af_one, bf_two") as voice:
        await service.create(body(voice="alloy"))
    with pytest.raises(InvalidRequest) as told:
        await service.create(body(instructions="Cheerfully."))
    assert (voice.value.param, told.value.param) == ("voice", "instructions")
    assert logged(store) == []


async def test_a_model_failing_before_its_first_audio_is_an_error_and_recorded(
    setup, caplog: pytest.LogCaptureFixture
) -> None:
    service, store, speaker = setup
    speaker.script = [RuntimeError("no phonemes")]
    with pytest.raises(OmniError) as failed:
        await service.create(body())
    assert failed.value.message == SERVER_ERROR and "no phonemes" in caplog.text
    (sid,) = {e.stream_id for e in logged(store) if "/" not in e.stream_id}
    events = await stream(store, sid)
    assert [e.type for e in events] == ["speech.in_progress", "speech.failed"]


async def test_after_its_first_audio_a_failure_ends_the_file_and_is_recorded(
    setup, caplog: pytest.LogCaptureFixture
) -> None:
    service, store, speaker = setup
    speaker.script = [b"ID3", RuntimeError("out of memory")]
    sid, pieces = await spoken(service)
    assert pieces == [b"ID3"]  # the file is cut short: its headers were sent
    end = (await stream(store, sid))[-1]
    assert end.type == "speech.failed" and json.loads(end.data)["error"]["message"] == SERVER_ERROR
    assert "out of memory" in caplog.text


async def test_a_client_that_leaves_midway_ends_it_cancelled(setup) -> None:
    service, store, speaker = setup
    speaker.script = [b"ID3", None]
    speech = await service.create(body())
    assert await anext(speech.pieces) == b"ID3"
    await speech.pieces.aclose()
    await service.close()  # its model stopped, its ending written
    end = (await stream(store, speech.id))[-1]
    ended = json.loads(end.data)
    assert end.type == "speech.failed" and ended["error"]["code"] == "cancelled"
    assert ended["spoken"] == {"segments": 1, "samples": 1000, "duration_s": 0.042,
                               "stopped": True} and ended["bytes"] == 3  # fmt: skip


async def test_recovery_ends_what_a_crash_left_open(setup) -> None:
    service, store, _ = setup
    await spoken(service)
    await service.appender.append(Append("spch-crashed", 0, [NewEvent("speech.in_progress", "{}")]))
    assert await service.recover() == 1
    assert [e.type for e in await store.read("spch-crashed")][-1] == "speech.failed"
    assert await service.recover() == 0
