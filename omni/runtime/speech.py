"""The MLX speaker: a text-to-speech model in a process of its own (omni.runtime.speech_worker).
The server never imports MLX, mlx-audio or PyAV for it: what comes back over the pipe is the
encoded file, a piece at a time, read by a thread and handed to the event loop."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from typing import Any

from omni.errors import ModelLoadError, OmniError
from omni.jobs import SpeechCapabilities, Spoken
from omni.runtime import blas, speech_worker
from omni.runtime import speech_wire as wire

log = logging.getLogger(__name__)


class MLXSpeaker:
    """Implements omni.jobs.Speaker: start() loads the model, speak() yields the bytes of one
    request as its process sends them (one request is spoken at a time; others wait)."""

    def __init__(self, path: str, model_id: str):
        self.path = path
        self.model_id = model_id
        self._caps = SpeechCapabilities(0, (), None, False)
        self._process: Any = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = {}
        self._gone: str | None = None  # why the model's process is no longer there
        self._reader = threading.Thread(target=self._read, name="omni-speech-reader", daemon=True)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads
        conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=speech_worker.main, args=(child, self.path), name="omni-speaker"
        )
        # Kokoro's convolutions on MLX's CPU build: matrix products, faster on OpenBLAS.
        with blas.preloaded(blas.preload(blas.AUTO)):
            self._process.start()
        child.close()
        try:
            message = conn.recv()
        except EOFError:
            self._process.join()
            message = wire.LoadFailed(f"its process exited ({self._process.exitcode})")
        if not isinstance(message, wire.Loaded):
            conn.close()
            self._process.join(timeout=5)
            self._process = None
            raise ModelLoadError(f"cannot load speech model {self.path}: {message.message}")
        self._caps = SpeechCapabilities(
            message.sample_rate, message.voices, message.default_voice, message.instructions
        )
        self._conn = conn
        self._reader.start()

    @property
    def capabilities(self) -> SpeechCapabilities:
        return self._caps

    @property
    def running(self) -> int:
        return len(self._pending)

    async def speak(
        self,
        text: str,
        voice: str | None,
        response_format: str,
        speed: float,
        instructions: str | None = None,
    ) -> AsyncIterator[bytes | Spoken]:
        """The encoded file's pieces, then one Spoken (how much was spoken); a failure of
        the model raises OmniError."""
        if self._gone is not None:
            raise OmniError(self._gone)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        job_id = next(self._ids)
        self._pending[job_id] = (loop, queue)
        try:
            self._send(wire.Speak(job_id, text, voice, response_format, speed, instructions))
            while True:
                match await queue.get():
                    case wire.Audio(_, data):
                        yield data
                    case wire.Done(_, samples, tokens):
                        yield Spoken(samples, self._caps.sample_rate, tokens)
                        return
                    case wire.Failed(_, message):
                        raise OmniError(f"the speech model failed: {message}")
                    case OmniError() as gone:
                        raise gone
        finally:
            self._pending.pop(job_id, None)

    def close(self) -> None:
        """Stop the model's process (requests in progress fail)."""
        if self._process is None:
            return
        self._gone = self._gone or "the server is shutting down"
        try:
            self._send(wire.Close())
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

    def _send(self, message: wire.Request) -> None:
        if self._conn is None:
            raise OmniError(self._gone or "the speech model is not loaded")
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # the process is gone; the reader reports it
            raise OmniError(self._gone or "the speech model's process is gone") from None

    def _read(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                break
            entry = self._pending.get(reply.id)
            if entry is not None:  # else its client went away: the pieces have no reader
                _put(*entry, reply)
        exit_code = self._process.exitcode if self._process is not None else None
        if self._gone is None:
            self._gone = f"the speech model's process exited unexpectedly ({exit_code})"
            log.error("%s", self._gone)
        for loop, queue in list(self._pending.values()):
            _put(loop, queue, OmniError(self._gone))


def _put(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any], value: Any) -> None:
    try:
        loop.call_soon_threadsafe(queue.put_nowait, value)
    except RuntimeError:  # that event loop is closed: nobody is left to read it
        pass
