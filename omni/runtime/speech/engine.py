"""The MLX speaker: a text-to-speech model in a process of its own (omni.runtime.speech.worker).
The server never imports MLX, mlx-audio or PyAV for it: what comes back over the pipe is the
encoded file, a piece at a time, read by a thread and handed to the event loop."""

from __future__ import annotations

import dataclasses
from typing import Any

from omni.errors import OmniError
from omni.ports.speech import SpeechCapabilities, SpeechOrder, Spoken
from omni.runtime.model_process import ModelProcess, Replies
from omni.runtime.speech import wire, worker


class MLXSpeaker(ModelProcess):
    """Implements omni.ports.speech.Speaker: start() loads the model, speak() answers the bytes of
    one request as its process sends them (one request is spoken at a time; others wait)."""

    def __init__(self, path: str, model_id: str):
        super().__init__(path, "speech model", "omni-speaker", wire.Close())
        self.model_id = model_id
        self._caps = SpeechCapabilities(0, (), None, False)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        # Kokoro's convolutions on MLX's CPU build: matrix products, faster on the preloaded BLAS.
        message = self.launch(worker.main, (self.path,), wire.Loaded)
        self._caps = SpeechCapabilities(
            message.sample_rate, message.voices, message.default_voice, message.instructions
        )

    @property
    def capabilities(self) -> SpeechCapabilities:
        return self._caps

    async def speak(self, order: SpeechOrder) -> Replies[bytes | Spoken]:
        """The encoded file's pieces, then one Spoken (how much was spoken); a failure of
        the model raises OmniError. cancel() stops the model after its segment."""
        return await self.stream(
            lambda i: wire.Speak(**dataclasses.asdict(order), id=i), self._piece
        )

    def _piece(self, reply: Any) -> tuple[bytes | Spoken, bool]:
        match reply:
            case wire.Audio(_, data):
                return data, False
            case wire.Done(_, samples, tokens, segments, cancelled):
                rate = self._caps.sample_rate
                return Spoken(samples, rate, tokens, segments, cancelled), True
            case wire.Failed(_, message):
                raise self.failed(message)
        raise OmniError(f"the speech model sent {type(reply).__name__}")
