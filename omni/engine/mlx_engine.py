"""The MLX engine: one thread owns the model; jobs in through a queue, outputs out as values."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from omni.engine.model_source import ModelSource
from omni.engine.types import (
    Delta,
    Failed,
    Finished,
    Job,
    Logprobs,
    Output,
    Started,
    TokenLogprob,
)
from omni.errors import ModelLoadError

log = logging.getLogger(__name__)


class MLXEngine:
    """Runs jobs one at a time on a dedicated thread with mlx-lm's stream_generate."""

    def __init__(self, source: ModelSource):
        self.source = source
        self.model_id = source.model_id
        self.context_length = 0
        self.generations = 0  # jobs that reached the model (tests check single flight with it)
        self._jobs: queue.Queue[tuple[Job, asyncio.AbstractEventLoop] | None] = queue.Queue()
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="omni-engine", daemon=True)
        self._model: Any = None
        self._tokenizer: Any = None

    def start(self) -> None:
        """Load the model on the engine thread; raise ModelLoadError if it cannot be loaded."""
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            raise ModelLoadError(f"cannot load model {self.source.path}: {self._load_error}")

    def _load(self) -> None:
        from mlx_lm import load

        loaded = load(self.source.path)
        self._model, self._tokenizer = loaded[0], loaded[1]
        args = getattr(self._model, "args", None)
        self.context_length = int(getattr(args, "max_position_embeddings", None) or 4096)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        tokens = self._tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=True
        )
        # transformers 5 may hand back a BatchEncoding; mlx-lm wants a flat list of ids.
        if isinstance(tokens, dict) or hasattr(tokens, "input_ids"):
            tokens = tokens["input_ids"]
        return list(tokens)

    def encode(self, text: str) -> list[int]:
        """Prompt tokens for raw text (legacy completions): no chat template."""
        return list(self._tokenizer.encode(text))

    def submit(self, job: Job) -> None:
        self._jobs.put((job, asyncio.get_running_loop()))

    def close(self) -> None:
        """Stop taking jobs once the job in progress (if any) has run out."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            self._load()
        except BaseException as exc:  # noqa: BLE001 - reported to start() as a value
            self._load_error = exc
            self._loaded.set()
            return
        self._loaded.set()
        while (item := self._jobs.get()) is not None:
            job, loop = item

            def emit(out: Output, _job: Job = job, _loop: asyncio.AbstractEventLoop = loop) -> None:
                _loop.call_soon_threadsafe(_job.outputs.put_nowait, out)

            try:
                self._generate(job, emit)
            except Exception as exc:  # errors travel as values
                log.exception("generation failed")
                emit(Failed(f"generation failed: {exc}"))

    def _token_logprob(self, token: int, logprob: float) -> TokenLogprob:
        text = self._tokenizer.decode([token])
        return TokenLogprob(text, tuple(text.encode()), logprob)

    def _logprobs(self, token: int, logprobs: Any, k: int) -> Logprobs:
        """The chosen token's log probability and the k most likely alternatives."""
        import mlx.core as mx

        chosen = self._token_logprob(token, float(logprobs[token].item()))
        if k == 0:
            return Logprobs(chosen)
        best = mx.argpartition(-logprobs, k - 1)[:k]
        ids: list[int] = best.tolist()  # type: ignore[assignment]
        values: list[float] = logprobs[best].tolist()
        ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
        return Logprobs(chosen, tuple(self._token_logprob(t, v) for t, v in ranked))

    def _generate(self, job: Job, emit: Callable[[Output], None]) -> None:
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.sample_utils import make_sampler

        done = len(job.resume_tokens)
        if not job.claim():  # cancelled while queued
            emit(Finished("cancelled", len(job.prompt), done))
            return
        emit(Started())
        self.generations += 1
        s = job.sampling
        if s.seed is not None:
            mx.random.seed(s.seed)
        detokenizer = self._tokenizer.detokenizer
        for token in job.resume_tokens:  # rebuild the text state of a resumed generation
            detokenizer.add_token(token)
        detokenizer.offset = len(detokenizer.text)
        eos = self._tokenizer.eos_token_ids
        reason = "length"
        remaining = s.max_tokens - done
        if remaining > 0:
            steps = generate_step(
                mx.array(job.prompt + job.resume_tokens),
                self._model,
                max_tokens=remaining,
                sampler=make_sampler(temp=s.temperature, top_p=s.top_p),
            )
            for token_array, logprobs in steps:
                token = int(token_array)
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
        detokenizer.finalize()
        if tail := detokenizer.last_segment:
            emit(Delta(tail, None))
        emit(Finished(reason, len(job.prompt), done))  # type: ignore[arg-type]
