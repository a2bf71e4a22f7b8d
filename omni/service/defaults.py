"""What a request gets for the sampling settings it leaves out (`omni serve --temp`, …)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from omni.ports.chat import RecommendedSampling

# What a request gets where nobody recommends anything: sampling as the model's logits say.
BUILT_IN: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": None,
}


class Asked(Protocol):
    """The sampling fields of a request (None: it leaves that one out)."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Defaults:
    """The operator's choices; None: the model's own recommendation, else BUILT_IN."""

    temperature: float | None = None
    top_p: float | None = None
    # The output cap of a request that sets none (None: what the context leaves).
    max_tokens: int | None = None

    def sampling(self, asked: Asked, model: RecommendedSampling) -> dict[str, Any]:
        """Each of BUILT_IN's fields: the request's, else the operator's, else the model's
        recommendation, else BUILT_IN's."""
        chosen = {"temperature": self.temperature, "top_p": self.top_p}
        return {
            name: _first(getattr(asked, name), chosen.get(name), getattr(model, name), fallback)
            for name, fallback in BUILT_IN.items()
        }

    def output_cap(self, asked: int | None, context_left: int) -> int:
        """The most tokens to generate: what was asked, else the server's cap; never more
        than the context leaves (as OpenAI clamps it: 10**23 asked is the context's rest)."""
        return max(1, min(asked or self.max_tokens or context_left, context_left))


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
