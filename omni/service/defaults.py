"""What a request gets for the sampling settings it leaves out (`omni serve --temp`, …)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Defaults:
    temperature: float = 1.0
    top_p: float = 1.0
    # The output cap of a request that sets none (None: what the context leaves).
    max_tokens: int | None = None

    def output_cap(self, asked: int | None, context_left: int) -> int:
        """The most tokens to generate: what was asked, else the server's cap; never more
        than the context leaves (as OpenAI clamps it: 10**23 asked is the context's rest)."""
        return max(1, min(asked or self.max_tokens or context_left, context_left))
