"""The MLX engine: one thread owns the model; jobs in through a queue, outputs out as values."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from omni.engine.model_source import ModelSource
from omni.engine.types import Failed, Job, Output
from omni.errors import ModelLoadError

log = logging.getLogger(__name__)


class MLXEngine:
    """Runs jobs one at a time on a dedicated thread (omni.engine.generation does the work)."""

    def __init__(
        self,
        source: ModelSource,
        prompt_cache_entries: int = 16,
        prompt_cache_bytes: int = 4 << 30,
    ):
        self.source = source
        self._cache_limits = (prompt_cache_entries, prompt_cache_bytes)
        self.model_id = source.model_id
        self.context_length = 0
        self._jobs: queue.Queue[tuple[Job, asyncio.AbstractEventLoop] | None] = queue.Queue()
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="omni-engine", daemon=True)
        self._model: Any = None
        self._tokenizer: Any = None
        self._generator: Any = None

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
        from omni.engine.generation import Generator

        self._generator = Generator(self._model, self._tokenizer, *self._cache_limits)
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
    def generations(self) -> int:
        """Jobs that reached the model (tests check single flight with it)."""
        return self._generator.generations if self._loaded.is_set() and self._generator else 0

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
                self._generator.run(job, emit)
            except Exception as exc:  # errors travel as values
                log.exception("generation failed")
                emit(Failed(f"generation failed: {exc}"))
