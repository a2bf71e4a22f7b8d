"""Log probabilities in OpenAI's shape, scored in the engine process for the jobs that ask."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from omni.ports.jobs import Logprobs, TokenLogprob


class Scorer:
    """Logprobs in OpenAI's shape: each token with its exact UTF-8 bytes (a token may hold
    part of a character), its text, and the top alternatives."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._bytes: dict[int, bytes] = {}

    def token_bytes(self, token: int) -> bytes:
        if token not in self._bytes:
            self._bytes[token] = self._raw(token)
        return self._bytes[token]

    def _raw(self, token: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if isinstance(piece, str):
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return bytes([int(piece[3:5], 16)])  # a byte-fallback token
            decoder = _byte_decoder()
            if piece and all(c in decoder for c in piece):  # byte-level BPE
                return bytes(decoder[c] for c in piece)
        return str(self.tokenizer.decode([token])).encode()

    def entry(self, token: int, logprob: float) -> TokenLogprob:
        raw = self.token_bytes(token)
        return TokenLogprob(raw.decode("utf-8", "replace"), tuple(raw), logprob)

    def __call__(self, token: int, logprobs: Any, k: int) -> Logprobs:
        """The chosen token's log probability and the k most likely alternatives."""
        chosen = self.entry(token, float(logprobs[token].item()))
        if k == 0:
            return Logprobs(chosen)
        best = mx.argpartition(-logprobs, k - 1)[:k]
        ids: list[int] = best.tolist()  # type: ignore[assignment]
        values: list[float] = logprobs[best].tolist()
        ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
        return Logprobs(chosen, tuple(self.entry(t, v) for t, v in ranked))


def _byte_decoder() -> dict[str, int]:
    from mlx_lm.tokenizer_utils import _byte_decoder as decoder

    return decoder()  # type: ignore[no-any-return]
