"""One generation on the engine thread: prefix-cache reuse, sampling, logprobs, detokenizing.

Runs on the thread that owns MLX; hands outputs to `emit` as small values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import (
    LRUPromptCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from omni.engine.types import (
    Delta,
    Finished,
    Job,
    Logprobs,
    Output,
    Sampling,
    Started,
    TokenLogprob,
)


class Generator:
    def __init__(self, model: Any, tokenizer: Any, cache_entries: int, cache_bytes: int):
        self.model = model
        self.tokenizer = tokenizer
        # KV caches of recent prompts+answers, by token prefix (mlx-lm's trie + LRU).
        self.prompt_cache = LRUPromptCache(max_size=cache_entries, max_bytes=cache_bytes)
        self.generations = 0

    def run(self, job: Job, emit: Callable[[Output], None]) -> None:
        done = len(job.resume_tokens)
        if not job.claim():  # cancelled while queued
            emit(Finished("cancelled", len(job.prompt), done))
            return
        emit(Started())
        self.generations += 1
        s = job.sampling
        if s.seed is not None:
            mx.random.seed(s.seed)
        detokenizer = self.tokenizer.detokenizer
        for token in job.resume_tokens:  # rebuild the text state of a resumed generation
            detokenizer.add_token(token)
        detokenizer.offset = len(detokenizer.text)
        fed = job.prompt + job.resume_tokens  # what the KV cache will hold
        cache, rest = self._nearest_cache(job.cache_namespace, fed)
        cached = len(fed) - len(rest)
        eos = self.tokenizer.eos_token_ids
        reason = "length"
        remaining = s.max_tokens - done
        if remaining > 0:
            steps = generate_step(
                mx.array(rest),
                self.model,
                max_tokens=remaining,
                sampler=sampler(s),
                logits_processors=logits_processors(s),
                prompt_cache=cache,
            )
            for step_token, logprobs in steps:
                token = int(step_token)
                fed.append(token)
                if token in eos:
                    reason = "stop"
                    break
                done += 1
                detokenizer.add_token(token)
                scored = None if s.logprobs is None else self._logprobs(token, logprobs, s.logprobs)
                emit(Delta(detokenizer.last_segment, token, scored))
                if job.stop.is_set():
                    reason = "cancelled"
                    break
            self.prompt_cache.insert_cache(job.cache_namespace, fed, cache)
        detokenizer.finalize()
        if tail := detokenizer.last_segment:
            emit(Delta(tail, None))
        emit(Finished(reason, len(job.prompt), done, cached))  # type: ignore[arg-type]

    def _nearest_cache(self, namespace: str, tokens: list[int]) -> tuple[list[Any], list[int]]:
        """The cached KV state sharing the longest prefix with `tokens`, and the tokens it
        still has to process (at least one: the model must see a token to predict the next)."""
        cache, rest = self.prompt_cache.fetch_nearest_cache(namespace, tokens)
        if cache is not None and not rest:
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                rest = tokens[-1:]
            else:
                cache = None
        if cache is None:
            return make_prompt_cache(self.model), list(tokens)
        return cache, list(rest)

    def _token_logprob(self, token: int, logprob: float) -> TokenLogprob:
        text = self.tokenizer.decode([token])
        return TokenLogprob(text, tuple(text.encode()), logprob)

    def _logprobs(self, token: int, logprobs: Any, k: int) -> Logprobs:
        """The chosen token's log probability and the k most likely alternatives."""
        chosen = self._token_logprob(token, float(logprobs[token].item()))
        if k == 0:
            return Logprobs(chosen)
        best = mx.argpartition(-logprobs, k - 1)[:k]
        ids: list[int] = best.tolist()  # type: ignore[assignment]
        values: list[float] = logprobs[best].tolist()
        ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
        return Logprobs(chosen, tuple(self._token_logprob(t, v) for t, v in ranked))


def sampler(s: Sampling) -> Callable[[mx.array], mx.array]:
    return make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)


def logits_processors(s: Sampling) -> list[Any]:
    return make_logits_processors(
        logit_bias=dict(s.logit_bias) or None,
        repetition_penalty=s.repetition_penalty,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
    )
