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


def _token_logprob(tokenizer: Any, token: int, logprob: float) -> TokenLogprob:
    text = tokenizer.decode([token])
    return TokenLogprob(text, tuple(text.encode()), logprob)


def score(tokenizer: Any, token: int, logprobs: Any, k: int) -> Logprobs:
    """The chosen token's log probability and the k most likely alternatives."""
    chosen = _token_logprob(tokenizer, token, float(logprobs[token].item()))
    if k == 0:
        return Logprobs(chosen)
    best = mx.argpartition(-logprobs, k - 1)[:k]
    ids: list[int] = best.tolist()  # type: ignore[assignment]
    values: list[float] = logprobs[best].tolist()
    ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
    return Logprobs(chosen, tuple(_token_logprob(tokenizer, t, v) for t, v in ranked))
