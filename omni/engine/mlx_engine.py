"""The MLX engine: one thread owns the model; jobs in through a queue, outputs out as values."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from omni.engine.model_source import ModelSource
from omni.engine.types import Job
from omni.errors import ModelLoadError

log = logging.getLogger(__name__)


class MLXEngine:
    """Owns the model on a dedicated thread; jobs are decoded together by continuous batching
    (omni.engine.batching)."""

    def __init__(
        self,
        source: ModelSource,
        prompt_cache_entries: int = 16,
        prompt_cache_bytes: int = 4 << 30,
        max_batch: int = 32,
    ):
        self.source = source
        self._max_batch = max_batch
        self._cache_limits = (prompt_cache_entries, prompt_cache_bytes)
        self.model_id = source.model_id
        self.context_length = 0
        self._jobs: queue.Queue[tuple[Job, asyncio.AbstractEventLoop] | None] = queue.Queue()
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="omni-engine", daemon=True)
        self._model: Any = None
        self._tokenizer: Any = None
        self._scheduler: Any = None

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
        from omni.engine.batching import BatchScheduler
        from omni.engine.generation import PrefixCache

        cache = PrefixCache(self._model, *self._cache_limits)
        self._scheduler = BatchScheduler(self._model, self._tokenizer, cache, self._max_batch)
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

    @property
    def max_batch(self) -> int:
        """How many jobs are decoded together; more wait, queued."""
        return self._scheduler.max_batch if self._scheduler is not None else self._max_batch

    @max_batch.setter
    def max_batch(self, value: int) -> None:
        self._max_batch = value
        if self._scheduler is not None:
            self._scheduler.max_batch = value

    @property
    def queued(self) -> int:
        """Jobs submitted but not yet decoding."""
        waiting = (
            sum(not job.stop.is_set() for job, _ in list(self._scheduler.waiting))
            if self._scheduler is not None
            else 0
        )
        return self._jobs.qsize() + waiting

    @property
    def generations(self) -> int:
        """Jobs that reached the model (tests check single flight with it)."""
        return self._scheduler.generations if self._scheduler is not None else 0

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
        self._scheduler.run(self._jobs)
