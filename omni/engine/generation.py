"""Pieces of one generation that the batch scheduler uses: prefix (KV) cache reuse, logits
processors and logprob scoring. They run on the engine thread."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import (
    LRUPromptCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.sample_utils import make_logits_processors

from omni.engine.types import Logprobs, Sampling, TokenLogprob


class PrefixCache:
    """KV caches of recent prompts and answers, found by longest shared token prefix
    (mlx-lm's trie + LRU), in namespaces (a request's prompt_cache_key)."""

    def __init__(self, model: Any, entries: int, nbytes: int):
        self.model = model
        self.lru = LRUPromptCache(max_size=entries, max_bytes=nbytes)

    def nearest(self, namespace: str, tokens: list[int]) -> tuple[list[Any], list[int]]:
        """A KV cache sharing the longest prefix with `tokens`, and the tokens it still has to
        process (at least one: the model must see a token to predict the next)."""
        cache, rest = self.lru.fetch_nearest_cache(namespace, tokens)
        if cache is not None and not rest:
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                rest = tokens[-1:]
            else:
                cache = None
        if cache is None:
            return make_prompt_cache(self.model), list(tokens)
        return cache, list(rest)

    def insert(self, namespace: str, tokens: list[int], cache: list[Any]) -> None:
        """Keep `cache` for reuse, keyed by exactly the tokens it holds."""
        held = getattr(cache[0], "offset", len(tokens)) if cache else 0
        if held > 0:
            self.lru.insert_cache(namespace, tokens[:held], cache)


def logits_processors(s: Sampling) -> list[Any]:
    return make_logits_processors(
        logit_bias=dict(s.logit_bias) or None,
        repetition_penalty=s.repetition_penalty,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
    )


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


class ThinkBudget:
    """At `budget` tokens inside the think block, the block's end is forced: the model stops
    reasoning and answers. mlx-lm's processor signature; single-token markers only."""

    def __init__(self, start: int, end: int, budget: int):
        self.start, self.end, self.budget = start, end, budget
        self._seen: int | None = None
        self._inside = False
        self._count = 0

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._seen is None:  # the prompt: did the template open the block?
            history: list[int] = tokens.tolist()  # type: ignore[assignment]
            opened = max((i for i, t in enumerate(history) if t == self.start), default=-1)
            closed = max((i for i, t in enumerate(history) if t == self.end), default=-1)
            self._inside = opened > closed
        else:
            new: list[int] = tokens[self._seen :].tolist()  # type: ignore[assignment]
            for token in new:
                if token == self.start:
                    self._inside, self._count = True, 0
                elif token == self.end:
                    self._inside = False
                elif self._inside:
                    self._count += 1
        self._seen = tokens.size
        if self._inside and self._count >= self.budget:
            mask = mx.full(logits.shape, -mx.inf, dtype=logits.dtype)
            return mx.where(mx.arange(logits.shape[-1]) == self.end, logits, mask)
        return logits
