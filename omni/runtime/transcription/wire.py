"""What crosses the pipe to a transcription model's process (omni.runtime.transcription.worker):
frozen values, audio as 16 kHz mono float32 bytes, a transcript as plain JSON types. For each
Transcribe the process sends a Window as each 30 s window is heard, then one Transcript (or
Failed); a Cancel stops it after the window under way, its Transcript saying so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni.ports.transcription import TranscribeOptions
from omni.runtime.chat.wire import Cancel, LoadFailed

__all__ = ["Cancel", "Close", "Failed", "LoadFailed", "Loaded", "Transcribe", "Transcript",
           "Window"]  # fmt: skip


@dataclass(frozen=True)
class Transcribe:
    id: int
    samples: bytes  # little-endian float32, mono, 16 kHz
    options: TranscribeOptions


@dataclass(frozen=True)
class Close:
    pass


Request = Transcribe | Cancel | Close


@dataclass(frozen=True)
class Loaded:
    multilingual: bool


@dataclass(frozen=True)
class Window:
    """One window heard: its segments with text (in the Transcript's shape)."""

    id: int
    window: int
    segments: list[dict[str, Any]]
    seconds: float  # of audio heard so far


@dataclass(frozen=True)
class Transcript:
    """omni.ports.transcription.Transcript's fields."""

    id: int
    result: dict[str, Any]
    windows: int
    cancelled: bool = False


@dataclass(frozen=True)
class Failed:
    id: int
    message: str


Reply = Window | Transcript | Failed
