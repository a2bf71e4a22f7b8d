"""What crosses the pipe between the server (omni.runtime.images.engine) and an image model's
process (omni.runtime.images.worker): one value per message. Pictures travel already encoded in the
format the client asked for, so the server only passes bytes on."""

from __future__ import annotations

from dataclasses import dataclass

from omni.ports.images import ImageOrder
from omni.runtime.chat.wire import Cancel, Close, LoadFailed

__all__ = ["Cancel", "Close", "Done", "Failed", "Generate", "LoadFailed", "Loaded", "Partial",
           "Picture"]  # fmt: skip

# The server to the model's process.


@dataclass(frozen=True, slots=True)
class Generate(ImageOrder):
    """What one request asks of the model, under its id."""

    id: int


Request = Generate | Cancel | Close

# The model's process to the server: once, Loaded or LoadFailed; then for each Generate, for
# each image, its Partial pictures then its Picture, and one Done or Failed.


@dataclass(frozen=True, slots=True)
class Loaded:
    default_steps: int  # what the model is made to take (FLUX.2 [klein]: 4, distilled)


@dataclass(frozen=True, slots=True)
class Partial:
    id: int
    image: int  # which of the request's n
    index: int  # 0-based, within its image
    data: bytes


@dataclass(frozen=True, slots=True)
class Picture:
    id: int
    image: int
    seed: int
    data: bytes
    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches this image took


@dataclass(frozen=True, slots=True)
class Done:
    id: int
    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches made, for all n


@dataclass(frozen=True, slots=True)
class Failed:
    id: int
    message: str
    cancelled: bool = False


Reply = Partial | Picture | Done | Failed
