"""The engine process of a vision-language model: loads it with mlx-vlm, then generates for
one job at a time with mlx-vlm's generate_step, its images through the model's own image
processor and vision tower. It speaks the text engine's pipe (omni.runtime.chat.wire): the same
Started, Token and Finished values, a cancel heard after every token.

One at a time: mlx-vlm's batch generator pads a batch's prompts and images together at its
start and takes no job in while it decodes, which is not continuous batching; a job alone
needs no masks and no padding."""

from __future__ import annotations

import io
import logging
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, cast

from omni import features
from omni.ports.jobs import FinishReason
from omni.runtime.chat.generation_config import model_recommends
from omni.runtime.chat.logprobs import Scorer
from omni.runtime.chat.sampling import Processors, seeded_sampler
from omni.runtime.chat.state import GENERATION_FAILED
from omni.runtime.chat.wire import (
    Cancel,
    Close,
    Failed,
    Finished,
    Loaded,
    Output,
    Request,
    Runtime,
    Spec,
    Started,
    Token,
)
from omni.runtime.chat.worker import MLX_SETTINGS, on_gpu, prefill_chunk
from omni.runtime.loading import weights
from omni.runtime.model_worker import serve_model
from omni.runtime.platform import blas
from omni.settings import EngineSettings

log = logging.getLogger(__name__)


def open_image(data: bytes) -> Any:
    """An encoded image as the RGB picture image processors take."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def context_length(model: Any) -> int:
    text = getattr(model.config, "text_config", None)
    return int(getattr(text, "max_position_embeddings", None) or 4096)


def main(
    conn: Connection,
    path: str,
    settings: EngineSettings,
    adapter: str | None = None,
    draft_path: str | None = None,
) -> None:
    """Load the model (with LoRA `adapter`s) and serve jobs from `conn` until Close."""

    def start() -> tuple[VisionRunner, Loaded]:
        if draft_path is not None:
            raise ValueError("vision models are not decoded speculatively: name no draft model")
        features.feature("vision").load()
        from mlx_lm.utils import load_tokenizer
        from mlx_vlm.utils import load

        model, processor = load(path, adapter_path=adapter)
        eos = model.config.eos_token_id
        ends = [eos] if isinstance(eos, int) else eos
        tokenizer = cast(Any, load_tokenizer)(path, eos_token_ids=ends)  # mlx-lm's is untyped
        library = None if on_gpu() else blas.in_use()
        taken = weights.nbytes(model)
        runtime = Runtime(library, weights.describe(model), settings.weights, memory_bytes=taken)
        runner = VisionRunner(model, processor, tokenizer, prefill_chunk(settings.prefill_chunk))
        eos_ids = sorted(tokenizer.eos_token_ids)
        return runner, Loaded(context_length(model), eos_ids, runtime, model_recommends(path))

    # The engine's MLX settings (omni.runtime.chat.worker.use_mlx_settings) as the process begins.
    serve_model(conn, None, start, lambda runner: runner.run(conn), **MLX_SETTINGS)


class VisionRunner:
    def __init__(self, model: Any, processor: Any, tokenizer: Any, chunk: int):
        self.model, self.processor, self.tokenizer = model, processor, tokenizer
        self.chunk = chunk
        self.eos = set(tokenizer.eos_token_ids)
        self.scorer = Scorer(tokenizer)
        self.waiting: deque[Spec] = deque()
        self.stopping: set[int] = set()
        self.closing = False
        self._processors = Processors(tokenizer)

    def run(self, conn: Connection) -> None:
        while not self.closing:
            if not self.waiting:
                self._take(conn, conn.recv())
                continue
            spec = self.waiting.popleft()
            conn.send([Started(spec.id, True)])
            try:
                ended = self._generate(conn, spec)
            except Exception:
                log.exception("generation failed for job %d", spec.id)
                ended = Failed(spec.id, GENERATION_FAILED)
            self.stopping.discard(spec.id)
            conn.send([ended])

    def _take(self, conn: Connection, message: Request) -> None:
        match message:
            case Spec():
                self.waiting.append(message)
            case Cancel(job_id):
                waited = [w for w in self.waiting if w.id == job_id]
                for spec in waited:  # cancelled while it waited: it ends now, never started
                    self.waiting.remove(spec)
                    done = len(spec.resume_tokens)
                    conn.send([Finished(job_id, "cancelled", len(spec.prompt), done)])
                if not waited:
                    self.stopping.add(job_id)
            case Close():
                self.closing = True
            case _:  # MaxBatch: one job at a time here, whatever the size
                pass

    def _heard(self, conn: Connection, job_id: int) -> bool:
        """Take in what the server sent; True if this job is to stop."""
        while conn.poll(0):
            self._take(conn, conn.recv())
        return self.closing or job_id in self.stopping

    def _generate(self, conn: Connection, spec: Spec) -> Output:
        import mlx.core as mx
        from mlx_vlm.generate import generate_step

        s = spec.sampling
        done = len(spec.resume_tokens)
        pixels, extra = self._pixels(spec.images)
        steps = generate_step(
            mx.array([spec.prompt + spec.resume_tokens]),
            self.model,
            pixels,
            None,  # no mask: a job alone has no padding
            max_tokens=s.max_tokens - done,
            sampler=self._sampler(spec),
            logits_processors=self._processors(spec),
            prefill_step_size=self.chunk,
            **extra,
        )
        reason: FinishReason = "length"
        try:
            for y, logprobs in steps:
                token = int(y)
                if token in self.eos:  # an end-of-sequence token: not output
                    reason = "stop"
                    break
                done += 1
                k = s.logprobs
                scored = None if k is None else self.scorer(token, logprobs, k)
                conn.send([Token(spec.id, token, scored)])
                if self._heard(conn, spec.id):
                    reason = "cancelled"
                    break
                if done >= s.max_tokens:
                    break
        finally:
            steps.close()
        return Finished(spec.id, reason, len(spec.prompt), done)

    def _pixels(self, images: tuple[bytes, ...]) -> tuple[Any, dict[str, Any]]:
        """The vision tower's input for `images`, through the model's image processor, and
        the processor's other outputs (image sizes, say), which go to the model by name."""
        import mlx.core as mx

        if not images:
            return None, {}
        pictures = [open_image(data) for data in images]
        inputs = dict(self.processor.image_processor(images=pictures, return_tensors="np"))
        pixels = mx.array(inputs.pop("pixel_values"))
        return pixels, {name: mx.array(value) for name, value in inputs.items()}

    def _sampler(self, spec: Spec) -> Any:
        from mlx_lm.sample_utils import make_sampler

        s = spec.sampling
        if s.seed is not None and s.temperature > 0:
            return seeded_sampler(s)
        return make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)
