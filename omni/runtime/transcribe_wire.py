"""What crosses the pipe to a transcription model's process (omni.runtime.transcribe_worker):
frozen values, audio as 16 kHz mono float32 bytes, a transcript as plain JSON types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Options:
    language: str | None = None  # ISO-639-1; None: detected (English for an .en model)
    prompt: str | None = None  # Whisper's initial prompt
    temperature: float | None = None  # None or 0: Whisper's fallback from 0 upwards
    translate: bool = False  # into English
    words: bool = False  # word timestamps


@dataclass(frozen=True)
class Transcribe:
    id: int
    samples: bytes  # little-endian float32, mono, 16 kHz
    options: Options


@dataclass(frozen=True)
class Close:
    pass


Request = Transcribe | Close


@dataclass(frozen=True)
class Loaded:
    multilingual: bool


@dataclass(frozen=True)
class LoadFailed:
    message: str


@dataclass(frozen=True)
class Transcript:
    """{text, language, segments: [{id, start, end, text, tokens, temperature, avg_logprob,
    compression_ratio, no_speech_prob, words?}]}, as mlx-audio's Whisper gives it."""

    id: int
    result: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    id: int
    message: str


Reply = Transcript | Failed
