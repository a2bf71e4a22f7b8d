"""A model's process that fails a request, or a model that cannot load: the client reads the
server's generic error (a load error names the model), never the worker's exception; the
server's log has it. Each service runs on the in-memory log with the real runtime adapter,
whose process is a thread answering over a real pipe as a failing worker does."""

from __future__ import annotations

import io
import json
import multiprocessing
import threading
import wave
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from omni.catalogue import ModelEntry
from omni.errors import SERVER_ERROR, ModelLoadError, OmniError
from omni.events import Appender, MemoryStore, Notifier
from omni.ports.embeddings import EmbeddingCapabilities
from omni.runtime.chat.wire import Cancel
from omni.runtime.embeddings import wire as embed_wire
from omni.runtime.embeddings.engine import MLXEmbedder
from omni.runtime.images import wire as image_wire
from omni.runtime.images.engine import MLXImager
from omni.runtime.model_process import ModelProcess
from omni.runtime.speech import wire as speech_wire
from omni.runtime.speech.engine import MLXSpeaker
from omni.runtime.transcription import wire as transcribe_wire
from omni.runtime.transcription.engine import MLXTranscriber
from omni.schemas.audio import TranscriptionCreate
from omni.schemas.embeddings import EmbeddingCreate
from omni.schemas.images import ImageGenerate
from omni.schemas.speech import SpeechCreate
from omni.service.embeddings import EmbeddingsService
from omni.service.images import ImagesService
from omni.service.models import Models
from omni.service.speech import SpeechService
from omni.service.transcriptions import TranscriptionsService, Upload

# What mlx-audio's Kokoro raised without misaki, where a worker reports it (with a path).
SECRET = (
    "ImportError: Kokoro requires the optional 'misaki' package for text processing. "
    "Install it with: pip install misaki (/home/someone/.venv/lib/python3.11)"
)


@pytest.fixture
def failing() -> Iterator[Callable[[ModelProcess, type], Any]]:
    """`failing(process, Failed)`: `process`, loaded, its worker answering each request with
    Failed(id, SECRET) over the pipe."""
    attached: list[tuple[ModelProcess, Any, threading.Thread]] = []

    def attach(process: ModelProcess, failed: type) -> Any:
        ours, theirs = multiprocessing.Pipe()
        process._conn = ours
        process._reader.start()

        def worker() -> None:
            while (message := theirs.recv()) is not None:
                if not isinstance(message, Cancel):
                    theirs.send(failed(message.id, SECRET))
            theirs.close()  # the process's exit: the reader reads the pipe's end

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        attached.append((process, ours, thread))
        return process

    yield attach
    for process, ours, thread in attached:  # no end closed under a recv in progress
        ours.send(None)
        thread.join(timeout=10)
        process._reader.join(timeout=10)
        ours.close()


class Source:
    """The model pool's part each service asks of: always `model`."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @asynccontextmanager
    async def _use(self, name: str | None) -> AsyncIterator[Any]:
        yield self.model

    use_speaker = use_transcriber = use_embedder = use_imager = _use


@pytest.fixture
async def log() -> AsyncIterator[tuple[MemoryStore, Appender, Notifier]]:
    store, notifier = MemoryStore(), Notifier()
    appender = Appender(store, notifier)
    appender.start()
    yield store, appender, notifier
    await appender.stop()


def recorded(store: MemoryStore) -> str:
    return json.dumps([event.data for event in store._events.values()])


def told_only_that_the_server_failed(
    failure: BaseException, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    assert isinstance(failure, OmniError) and failure.status == 500
    assert failure.body()["error"]["message"] == SERVER_ERROR
    assert SECRET not in json.dumps(failure.body()) and SECRET not in recorded(store)
    assert SERVER_ERROR in recorded(store)  # its record says it failed, as the client read
    assert SECRET in caplog.text  # for the operator


async def test_speech(failing: Any, log: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, appender, _ = log
    speaker = failing(MLXSpeaker("/models/kokoro", "kokoro"), speech_wire.Failed)
    service = SpeechService(store, appender, Source(speaker))
    with pytest.raises(OmniError) as failed:
        await service.create(SpeechCreate(model="kokoro", input="Hello."))
    told_only_that_the_server_failed(failed.value, store, caplog)


def a_wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 1600)
    return out.getvalue()


async def test_transcription(failing: Any, log: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, appender, notifier = log
    model = failing(MLXTranscriber("/models/whisper", "whisper"), transcribe_wire.Failed)
    service = TranscriptionsService(store, appender, notifier, Source(model))
    _, job = await service.create(TranscriptionCreate(), Upload(a_wav(), "a.wav", "transcribe"))
    told_only_that_the_server_failed(await job, store, caplog)  # streamed, this is in the log


async def test_embeddings(failing: Any, log: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, appender, _ = log
    embedder = failing(MLXEmbedder("/models/minilm", "minilm"), embed_wire.Failed)
    embedder._caps = EmbeddingCapabilities(384, 512, 1000)  # what its start would have read
    service = EmbeddingsService(store, appender, Source(embedder))
    with pytest.raises(OmniError) as failed:
        await service.create(EmbeddingCreate(input=[[1, 2, 3]], model="minilm"))
    told_only_that_the_server_failed(failed.value, store, caplog)


async def test_images(failing: Any, log: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, appender, _ = log
    imager = failing(MLXImager("/models/klein", "klein"), image_wire.Failed)
    service = ImagesService(store, appender, Source(imager))
    with pytest.raises(OmniError) as failed:
        await service.create(ImageGenerate(prompt="a cat", model="klein"))
    told_only_that_the_server_failed(failed.value, store, caplog)


async def test_a_model_that_cannot_load_is_named_and_its_reason_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def load(entry: ModelEntry) -> Any:
        raise ModelLoadError(f"cannot load speech model /models/{entry.id}: {SECRET}")

    def crash(entry: ModelEntry) -> Any:
        raise RuntimeError(SECRET)

    for loader in (load, crash):
        catalogue = [ModelEntry("kokoro", "speech", "/models/kokoro", "named")]
        models = Models(catalogue, loader, default="kokoro")
        with pytest.raises(ModelLoadError) as failed:
            async with models.use_speaker("kokoro"):
                pass
        error = failed.value.body()["error"]
        assert error["code"] == "model_load_error" and "'kokoro'" in error["message"]
        assert SECRET not in error["message"] and "/models/" not in error["message"]
        assert SECRET in caplog.text
        caplog.clear()
        await models.close()
