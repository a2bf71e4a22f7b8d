"""The MLX transcriber: a Whisper model in a process of its own (omni.runtime.
transcribe_worker), answered by a reader thread so that the event loop never waits on the
pipe. The process preloads the engine's BLAS (omni.runtime.blas): Whisper runs in float32 on
MLX's CPU, where the BLAS does its matrix products."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError, OmniError
from omni.jobs import Audio, TranscribeOptions
from omni.runtime import audio, blas, transcribe_wire, transcribe_worker

log = logging.getLogger(__name__)


class MLXTranscriber:
    """Implements omni.jobs.Transcriber."""

    def __init__(self, path: str, model_id: str):
        self.path, self.model_id = path, model_id
        self.multilingual = False
        self._process: Any = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._gone: str | None = None  # why the model's process is no longer there
        self._reader = threading.Thread(target=self._read, name="omni-stt-reader", daemon=True)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        if not (Path(self.path) / "config.json").is_file():
            raise ModelLoadError(f"cannot load transcription model {self.path}: no config.json")
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads
        conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=transcribe_worker.main, args=(child, self.path), name="omni-transcriber"
        )
        with blas.preloaded(blas.preload(blas.AUTO)):
            self._process.start()
        child.close()
        try:
            message = conn.recv()
        except EOFError:
            self._process.join()
            message = transcribe_wire.LoadFailed(f"its process exited ({self._process.exitcode})")
        if not isinstance(message, transcribe_wire.Loaded):
            conn.close()
            self._process.join(timeout=5)
            self._process = None
            raise ModelLoadError(f"cannot load transcription model {self.path}: {message.message}")
        self.multilingual = message.multilingual
        self._conn = conn
        self._reader.start()

    @property
    def running(self) -> int:
        return len(self._pending)

    def decode(self, data: bytes, filename: str) -> Audio:
        return audio.decode(data, filename)

    async def transcribe(self, heard: Audio, options: TranscribeOptions) -> dict[str, Any]:
        if self._gone is not None:
            raise OmniError(self._gone)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        job_id = next(self._ids)
        self._pending[job_id] = (loop, future)
        try:
            message = transcribe_wire.Transcribe(job_id, heard.samples, options)
            await asyncio.to_thread(self._send, message)  # megabytes of audio: off the loop
            return await future  # type: ignore[no-any-return]
        finally:
            self._pending.pop(job_id, None)

    def close(self) -> None:
        """Stop the model's process (transcriptions in progress fail)."""
        if self._process is None:
            return
        self._gone = self._gone or "the server is shutting down"
        try:
            self._send(transcribe_wire.Close())
        except OmniError:
            pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        if self._reader.is_alive():
            self._reader.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._process = None

    def _send(self, message: transcribe_wire.Request) -> None:
        if self._conn is None:
            raise OmniError(self._gone or "the transcription model is not loaded")
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # the process is gone; the reader reports it
            raise OmniError(self._gone or "the transcription model's process is gone") from None

    def _read(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                break
            entry = self._pending.get(reply.id)
            if entry is None:
                continue
            loop, future = entry
            match reply:
                case transcribe_wire.Transcript(_, result):
                    value: Any = result
                case transcribe_wire.Failed(_, message):
                    value = OmniError(f"the transcription model failed: {message}")
            _settle(loop, future, value)
        exit_code = self._process.exitcode if self._process is not None else None
        if self._gone is None:
            self._gone = f"the transcription model's process exited unexpectedly ({exit_code})"
            log.error("%s", self._gone)
        for loop, future in list(self._pending.values()):
            _settle(loop, future, OmniError(self._gone))


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any) -> None:
    def put() -> None:
        if future.done():
            return
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)

    try:
        loop.call_soon_threadsafe(put)
    except RuntimeError:  # that event loop is closed: nobody is left to read it
        pass
