"""What the speech service may ask of a speech model's runner: audio spoken from text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from omni.ports.model import Answer, Model


@dataclass(frozen=True, slots=True)
class SpeechCapabilities:
    """What a loaded speech model can do."""

    sample_rate: int  # of the audio it speaks
    voices: tuple[str, ...]  # the voices it has; empty: it names none (any is passed on)
    default_voice: str | None
    instructions: bool  # whether it takes instructions on how to speak


@dataclass(frozen=True, slots=True)
class SpeechOrder:
    """What one speech request asks of the model."""

    text: str
    voice: str | None
    response_format: str  # a key of omni.schemas.speech.MEDIA_TYPES
    speed: float
    instructions: str | None  # how to speak, for a model that takes them


@dataclass(frozen=True, slots=True)
class Spoken:
    """How much a speech request spoke: the last thing Speaker.speak yields."""

    samples: int
    sample_rate: int
    input_tokens: int  # what the model read (Kokoro: phonemes)
    segments: int = 0  # the model's pieces (Kokoro: sentences or lines)
    cancelled: bool = False  # stopped by cancel() before the model was done

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0


class Speaker(Model, Protocol):
    """What the service needs from a speech model's runner (omni.runtime.speech.engine); `running`
    counts the requests being spoken or waiting to be."""

    @property
    def capabilities(self) -> SpeechCapabilities: ...

    async def speak(self, order: SpeechOrder) -> Answer[bytes | Spoken]:
        """Sent to the model: the encoded audio's pieces as they are spoken, then one
        Spoken."""
        ...
