"""What crosses the pipe between the server (omni.runtime.embeddings.engine) and an embedding
model's process (omni.runtime.embeddings.worker): one value per message, each side's `match` on
its class.
Vectors travel as float32 bytes, not lists of floats: 64 vectors of 384 pickle to ~100 KB
in microseconds, where a list of Python floats costs a hundred times more."""

from __future__ import annotations

from dataclasses import dataclass

from omni.runtime.chat.wire import LoadFailed

__all__ = ["Close", "Embed", "Failed", "LoadFailed", "Loaded", "Vectors"]

# The server to the model's process.


@dataclass(frozen=True, slots=True)
class Embed:
    """Inputs (token ids, special tokens included) to embed, in order."""

    id: int
    inputs: list[list[int]]


@dataclass(frozen=True, slots=True)
class Close:
    """End the process."""


Request = Embed | Close

# The model's process to the server: once, Loaded or LoadFailed; then one reply an Embed.


@dataclass(frozen=True, slots=True)
class Loaded:
    dimensions: int  # of a vector, after pooling


@dataclass(frozen=True, slots=True)
class Vectors:
    """One unit vector an input, in the request's order: float32, little-endian, row-major."""

    id: int
    data: bytes
    count: int


@dataclass(frozen=True, slots=True)
class Failed:
    id: int
    message: str


Reply = Vectors | Failed
