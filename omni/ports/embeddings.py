"""What the embeddings service may ask of an embedding model's runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from omni.ports.model import Model


@dataclass(frozen=True, slots=True)
class EmbeddingCapabilities:
    """What a loaded embedding model can do."""

    dimensions: int  # the length of its vectors
    context_length: int  # the most tokens of one input
    vocab_size: int = 0  # token ids given as input are below this (0: not known, not checked)


class Embedder(Model, Protocol):
    """What the service needs from an embedding model's runner (omni.runtime.embeddings.engine);
    `running` counts the batches being embedded now."""

    @property
    def capabilities(self) -> EmbeddingCapabilities: ...

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Each text's tokens, special tokens included, not truncated."""
        ...

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One unit vector (L2-normalized, pooled as the model was trained) per input,
        in order; inputs are batched into passes of the model by the runner."""
        ...
