"""What crosses the pipe between the server (omni.runtime.speech.engine) and a speech model's
process (omni.runtime.speech.worker): one value per message. Audio travels already encoded in the
format the client asked for, a piece a message, so the server only passes bytes on."""

from __future__ import annotations

from dataclasses import dataclass

from omni.ports.speech import SpeechOrder
from omni.runtime.chat.wire import Cancel, Close, LoadFailed

__all__ = ["Audio", "Cancel", "Close", "Done", "Failed", "LoadFailed", "Loaded", "Speak"]

# The server to the model's process.


@dataclass(frozen=True, slots=True)
class Speak(SpeechOrder):
    """What one request asks of the model, under its id."""

    id: int


Request = Speak | Cancel | Close

# The model's process to the server: once, Loaded or LoadFailed; then for each Speak its
# Audio pieces, in order, and one Done or Failed. A Cancel stops it after the segment the
# model is speaking: its Done says so.


@dataclass(frozen=True, slots=True)
class Loaded:
    sample_rate: int
    voices: tuple[str, ...]  # the voices it has (empty: the model names none)
    default_voice: str | None
    instructions: bool  # whether its generate() takes instructions


@dataclass(frozen=True, slots=True)
class Audio:
    id: int
    data: bytes  # the next bytes of the encoded file


@dataclass(frozen=True, slots=True)
class Done:
    id: int
    samples: int  # spoken, at the model's sample rate
    input_tokens: int  # what the model read (Kokoro: phonemes)
    segments: int = 0  # the model's pieces spoken (Kokoro: sentences or lines)
    cancelled: bool = False  # stopped by a Cancel before the model was done


@dataclass(frozen=True, slots=True)
class Failed:
    id: int
    message: str


Reply = Audio | Done | Failed
