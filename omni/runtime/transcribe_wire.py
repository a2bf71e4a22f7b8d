"""What crosses the pipe to a transcription model's process (omni.runtime.transcribe_worker):
frozen values, audio as 16 kHz mono float32 bytes, a transcript as plain JSON types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni.jobs import TranscribeOptions


@dataclass(frozen=True)
class Transcribe:
    id: int
    samples: bytes  # little-endian float32, mono, 16 kHz
    options: TranscribeOptions


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
    """omni.jobs.Transcriber.transcribe's result."""

    id: int
    result: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    id: int
    message: str


Reply = Transcript | Failed
