"""What the transcription service may ask of a speech-to-text model's runner: uploads decoded,
recordings heard window by window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from omni.ports.model import Answer, Model


@dataclass(frozen=True)
class Audio:
    """An upload decoded to what Whisper hears."""

    samples: bytes  # little-endian float32, mono, 16 kHz
    format: str  # the container FFmpeg found ("wav", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", …)
    seconds: float


@dataclass(frozen=True)
class TranscribeOptions:
    language: str | None = None  # ISO-639-1; None: detected (English for an .en model)
    prompt: str | None = None  # Whisper's initial prompt
    temperature: float | None = None  # None or 0: Whisper's fallback from 0 upwards
    translate: bool = False  # into English
    words: bool = False  # word timestamps


@dataclass(frozen=True)
class Heard:
    """One window of a recording heard (Whisper's 30 s): its segments with text, in the
    shape of Transcript's, and the seconds of audio heard so far."""

    window: int  # 0, 1, …
    segments: list[dict[str, Any]]
    seconds: float


@dataclass(frozen=True)
class Transcript:
    """A whole recording heard (after its windows): {text, language, segments: [{id, seek,
    start, end, text, tokens, temperature, avg_logprob, compression_ratio, no_speech_prob,
    words?}]}, as mlx-audio's Whisper gives it. `cancelled`: stopped after `windows`."""

    result: dict[str, Any]
    windows: int
    cancelled: bool = False


class Transcriber(Model, Protocol):
    """What the service needs from a speech-to-text model's runner
    (omni.runtime.transcription.engine); `running` counts the recordings being transcribed now."""

    def decode(self, data: bytes, filename: str) -> Audio:
        """An uploaded file's audio (blocking: run in a thread); an InvalidRequest naming
        `file` for what holds none."""
        ...

    async def transcribe(
        self, audio: Audio, options: TranscribeOptions
    ) -> Answer[Heard | Transcript]:
        """Sent to the model: each window as it is heard, then the Transcript (a failure
        raises OmniError)."""
        ...
