"""What the image generation service may ask of an image model's runner: pictures drawn
from a prompt, and the partial ones on the way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from omni.ports.model import Model


@dataclass(frozen=True, slots=True)
class ImageCapabilities:
    """What a loaded image generation model can do."""

    default_steps: int  # the denoising steps it is made to take (medium quality)


@dataclass(frozen=True, slots=True)
class ImageOrder:
    """What one image generation request asks of the model."""

    prompt: str
    n: int
    width: int
    height: int
    steps: int
    seed: int  # the first image's; the next ones take seed + 1, seed + 2, ...
    output_format: str  # png, jpeg or webp
    compression: int  # 0-100: jpeg's and webp's quality loss (100: none)
    partial_images: int  # 0-3 of each image, decoded from its latents on the way


@dataclass(frozen=True, slots=True)
class PartialPicture:
    """An image on its way, decoded from its latents at an intermediate step."""

    image: int  # which of the request's n
    index: int  # 0-based, within its image
    data: bytes  # encoded as the request asked


@dataclass(frozen=True, slots=True)
class Picture:
    """One image drawn, and what it took (OpenAI's usage of one image)."""

    image: int
    seed: int
    data: bytes
    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches it took


@dataclass(frozen=True, slots=True)
class Drawn:
    """How much an image request took: the last thing Imager.draw yields."""

    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches made, for all n


class Imager(Model, Protocol):
    """What the service needs from an image generation model's runner (omni.runtime.images.engine);
    `running` counts the requests being drawn or waiting to be."""

    @property
    def capabilities(self) -> ImageCapabilities: ...

    def draw(self, order: ImageOrder) -> AsyncIterator[PartialPicture | Picture | Drawn]:
        """Each image's partial pictures then the picture, in order, then one Drawn."""
        ...
