"""The MLX speaker: a text-to-speech model in a process of its own (omni.runtime.speech_worker).
The server never imports MLX, mlx-audio or PyAV for it: what comes back over the pipe is the
encoded file, a piece at a time, read by a thread and handed to the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from omni.errors import OmniError
from omni.jobs import SpeechCapabilities, Spoken
from omni.runtime import speech_wire as wire
from omni.runtime import speech_worker
from omni.runtime.model_process import ModelProcess


class MLXSpeaker(ModelProcess):
    """Implements omni.jobs.Speaker: start() loads the model, speak() yields the bytes of one
    request as its process sends them (one request is spoken at a time; others wait)."""

    def __init__(self, path: str, model_id: str):
        super().__init__(path, "speech model", "omni-speaker", wire.Close())
        self.model_id = model_id
        self._caps = SpeechCapabilities(0, (), None, False)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        # Kokoro's convolutions on MLX's CPU build: matrix products, faster on the preloaded BLAS.
        message = self.launch(speech_worker.main, (self.path,), wire.Loaded)
        self._caps = SpeechCapabilities(
            message.sample_rate, message.voices, message.default_voice, message.instructions
        )

    @property
    def capabilities(self) -> SpeechCapabilities:
        return self._caps

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

    def deliver(self, loop: asyncio.AbstractEventLoop, receiver: Any, value: Any) -> None:
        """Each reply of a request goes to its queue, as it comes (speak() reads them)."""
        _put(loop, receiver, value)


def _put(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any], value: Any) -> None:
    try:
        loop.call_soon_threadsafe(queue.put_nowait, value)
    except RuntimeError:  # that event loop is closed: nobody is left to read it
        pass
