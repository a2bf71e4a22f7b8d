"""The engine process: loads the model, then decodes what the server sends until it closes.

It runs apart from the server so that the server's Python work (HTTP, SQLite, JSON) never
holds the interpreter lock a decode step is waiting for.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni.heap import set_aside
from omni.runtime.chat.generation_config import model_recommends
from omni.runtime.chat.observe import QUIET, Observer, StepStats
from omni.runtime.chat.state import RanksOutOfStep
from omni.runtime.chat.wire import Loaded, Runtime
from omni.runtime.loading import weights
from omni.runtime.model_worker import serve_model
from omni.runtime.platform import blas, gemv
from omni.runtime.platform.cpu_attention import use_exp2_attention
from omni.settings import EngineSettings

if TYPE_CHECKING:
    from omni.runtime.chat.scheduler import BatchScheduler
    from omni.runtime.loading.source import ModelSource

# MLX settings the engine runs with unless the environment sets them (MLX reads each at first
# use). cuDNN's attention builds a graph for each new shape: ~65 ms for every prompt length not
# seen before, where serving sees a new one with nearly every request; without it, on an H200,
# a group of 8 new prompts reaches its first tokens in 39 ms instead of 114, one stream decodes
# 373 tokens/s instead of 294 and 64 streams through the server went 0.54x -> 0.82x raw
# (bench/attention.py, in git history). A prompt of 4,000 new tokens prefills ~50 ms
# slower. On a CPU (or Metal) the setting does nothing.
MLX_SETTINGS = {"MLX_CUDA_USE_CUDNN_SDPA": "0"}

log = logging.getLogger(__name__)


# The shortest shared prefix the prefix cache reuses, on a GPU. There a prompt's tokens are
# prefilled in a batch for little (8 prompts of 66 tokens: ~12 ms on an H200), while a reused
# prefix is one more cache to merge into the batch: 64 streams sharing a chat template's first
# 16 tokens prefilled in 115-157 ms a round with reuse, 76-108 ms without (0.84x -> 0.89x raw;
# python bench/concurrency.py). The reuses that matter (a conversation's
# history, an agent's resent context) are thousands of tokens. On a CPU every token saved is
# prefill time saved (SmolLM2 prefills ~15 tokens/s here): any shared prefix is reused.
GPU_MIN_REUSE = 256


# Prompts prefilled in one forward pass on an NVIDIA GPU (mlx-lm's default, and the engine's
# elsewhere: 8). On an H200 a pass of 16 short prompts took 25-28 ms against 19-21 ms for 8,
# and a burst waits for half the passes and for the decode steps that come between two
# groups: at 64 streams, rounds of 128 tokens took 1.40 s instead of 2.00 s (medians of 16
# rounds each, the same host, alternating), first tokens p95 378-432 ms instead of 602-622
# (python bench/concurrency.py). Not measured on Apple silicon: 8 there.
CUDA_PREFILL_GROUP = 16


def on_gpu() -> bool:
    import mlx.core as mx

    return bool(mx.default_device().type == mx.DeviceType.gpu)


def on_cuda() -> bool:
    import mlx.core as mx

    return on_gpu() and bool(mx.cuda.is_available())


def min_reuse() -> int:
    """The shortest prefix worth reusing on this machine's default device."""
    return GPU_MIN_REUSE if on_gpu() else 1


def prefill_group(chosen: int | None = None) -> int:
    """Prompts prefilled together: `chosen` (EngineSettings.prefill_group), else this machine's
    default device's."""
    from omni.runtime.chat.state import PREFILL_GROUP

    return chosen or (CUDA_PREFILL_GROUP if on_cuda() else PREFILL_GROUP)


# Prompt tokens fed to one prompt a step: a long prompt holds the running streams for one
# chunk at most, and a cancel is heard between two. The fastest prefill measured, which is
# also the shortest hold within 10% of it (python bench/chunks.py; bench/README.md): on this
# project's 2-core CPU (SmolLM2-135M in float32 on OpenBLAS, 1,024 tokens) 128 tokens, 182
# tokens/s, a chunk 0.70 s (64: 0.87x; 256: 0.98x, 1.43 s; 512: 0.87x); on an H200 (a 1.24 B
# llama, bf16, 4,096 tokens) 2,048, 74,547 tokens/s, a chunk 27.5 ms (1,024: 0.88x).
CPU_PREFILL_CHUNK = 128
GPU_PREFILL_CHUNK = 2048


def prefill_chunk(chosen: int | None = None) -> int:
    """Prompt tokens a step feeds one prompt: `chosen` (EngineSettings.prefill_chunk), else this
    machine's default device's."""
    return chosen or (GPU_PREFILL_CHUNK if on_gpu() else CPU_PREFILL_CHUNK)


def use_mlx_settings() -> None:
    """The engine's MLX settings, where the environment leaves them unset (the benchmarks'
    raw mlx-lm baselines call this too: both sides of a ratio run the same kernels)."""
    for name, value in MLX_SETTINGS.items():
        os.environ.setdefault(name, value)


def as_run(model: Any, setting: str, library: str | None) -> Any:
    """The model as the engine runs it: its weights in the format `setting` picks (`library`:
    the BLAS in use, None on a GPU), on a CPU with its attention's exponentials as exp2 (the
    benchmarks' raw mlx-lm baselines call this too)."""
    if weights.choose(setting, model, blas.optimized(library)) == weights.FLOAT32:
        model = weights.to_float32(model)
    if not on_gpu():
        use_exp2_attention(model)
    return model


def spawn(
    target: Callable[..., None], source: ModelSource, settings: EngineSettings
) -> tuple[Any, Connection, Path | None]:
    """Start the engine process running `target` (main, or a vision model's) for `source`,
    with the engine's BLAS preloaded (omni.runtime.platform.gemv): the process, the server's end
    of its pipe, and the preloaded forwarder's file, to remove once the model is loaded."""
    settings = dataclasses.replace(settings, model_id=source.model_id)
    if (ranks := settings.ranks) is not None:
        from omni.runtime.chat.ranks import launch

        return launch(source, settings, ranks)
    ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads
    conn, child = ctx.Pipe()
    process = ctx.Process(
        target=target,
        args=(child, source.path, settings, source.adapter, source.draft),
        name="omni-engine",
    )
    with gemv.engine_libraries(settings.blas) as forwarder:
        process.start()
    child.close()
    return process, conn, forwarder


def main(
    conn: Connection,
    path: str,
    settings: EngineSettings,
    adapter: str | None = None,
    draft_path: str | None = None,
    group: Any = None,
) -> None:
    """Load the model (with LoRA `adapter`s; `draft_path`: a draft model for speculative
    decoding, of the same vocabulary) and serve jobs from `conn` until Close. `group`: the
    ranks this one shares the model with (omni.runtime.chat.rank), whose `conn` is a
    Lockstep."""
    observer = watching(settings)

    def serve(scheduler: BatchScheduler) -> None:
        if group is not None:  # every rank decides by rank 0's time (omni.runtime.chat.lockstep)
            scheduler.clock = conn.clock  # type: ignore[attr-defined]
            conn.stream = scheduler.batch.stream  # type: ignore[attr-defined]
            scheduler.sharded = True
        try:
            scheduler.run(conn)
        except (EOFError, OSError):  # the server is gone: nobody is left to decode for
            pass
        except RanksOutOfStep:  # this rank ends, and the launcher ends the others: no wait
            logging.shutdown()  # for a collective that never completes (its peer is gone)
            os._exit(1)
        finally:
            scheduler.cache.close()  # the disk tier's writes handed over so far
        observer.close()

    # It begins as every model process does (omni.runtime.model_worker: what the server
    # preloaded, omni.runtime.platform's BLAS, is not looked for again by a process it starts),
    # with the engine's MLX settings (use_mlx_settings).
    load = partial(load_engine, path, settings, observer, adapter, draft_path, group)
    serve_model(conn, None, load, serve, **MLX_SETTINGS)


def load_engine(
    path: str,
    settings: EngineSettings,
    observer: Observer,
    adapter: str | None = None,
    draft_path: str | None = None,
    group: Any = None,
) -> tuple[BatchScheduler, Loaded]:
    """The model at `path` as the engine runs it, in its scheduler, and what the server is told
    of it once loaded (`group`: its shard of it, omni.runtime.chat.rank)."""
    from mlx_lm import load

    from omni.runtime.chat.prefix_cache import PrefixCache
    from omni.runtime.chat.scheduler import BatchScheduler

    if group is not None:
        from omni.runtime.chat.rank import sharded

        if adapter or draft_path:  # every rank stops here alike; rank 0 tells the server
            raise ValueError("a sharded model takes no LoRA adapter and no draft model")

        model, tokenizer = sharded(path, group, settings.ranks)
    else:
        model, tokenizer = load(path, adapter_path=adapter)[:2]
    library = None if on_gpu() else blas.in_use()
    model = as_run(model, settings.weights, library)
    draft = None if draft_path is None else load_draft(draft_path, tokenizer, settings, library)
    forwarded = not on_gpu() and gemv.forwarding(blas.holder("cblas_sgemm"))
    taken = weights.nbytes(model) + (0 if draft is None else weights.nbytes(draft))
    runtime = Runtime(library, weights.describe(model), settings.weights, forwarded, taken)
    limits = (settings.prompt_cache_entries, settings.prompt_cache_bytes)
    # A shard's rates and files are its own: ranks could not agree on what to load.
    disk = None if group is not None else disk_tier(path, model, tokenizer, settings, adapter)
    cache = PrefixCache(model, *limits, min_reuse(), disk)
    scheduler = BatchScheduler(
        model,
        tokenizer,
        cache,
        settings.max_batch,
        settings.gather_s,
        observer,
        prefill_group(settings.prefill_group),
        prefill_chunk(settings.prefill_chunk),
        draft,
        settings.num_draft_tokens,
    )
    set_aside("engine")  # the model and the tokenizer: no full collection walks them again
    ends = sorted(tokenizer.eos_token_ids)
    return scheduler, Loaded(context_length(model), ends, runtime, model_recommends(path))


def disk_tier(
    path: str, model: Any, tokenizer: Any, settings: EngineSettings, adapter: str | None
) -> Any:
    """The prefix cache's disk tier for this model as run (None: off, or a memory tier off):
    what an earlier process wrote is found again; its read rate is measured once."""
    from omni.runtime.chat.kv_disk import DiskTier, model_key

    folder = settings.prompt_cache_dir
    if folder is None or settings.prompt_cache_bytes <= 0:
        return None
    key = model_key(path, model, tokenizer, adapter)
    try:
        tier = DiskTier(
            Path(folder), key, settings.prompt_cache_disk_bytes,
            model_id=settings.model_id, model_path=path,
        )  # fmt: skip
        tier.scan()
        tier.rates.probe(tier.dir)
    except OSError as exc:  # a folder it cannot use: the memory tier alone, said once
        log.warning("the prefix cache's disk tier is off: %s", exc)
        return None
    return tier


def load_draft(path: str, tokenizer: Any, settings: EngineSettings, library: str | None) -> Any:
    """A draft model for speculative decoding, which must share the model's vocabulary."""
    from mlx_lm import load

    draft, drafts = load(path)[:2]
    if drafts.vocab_size != tokenizer.vocab_size:
        raise ValueError(
            f"the draft model {path} has a vocabulary of {drafts.vocab_size} "
            f"tokens, the model {tokenizer.vocab_size}: they must be the same"
        )
    if weights.choose(settings.weights, draft, blas.optimized(library)) == weights.FLOAT32:
        draft = weights.to_float32(draft)
    return draft


def watching(settings: EngineSettings) -> Observer:
    """What the scheduler tells of its steps goes to StepStats where a benchmark asked for
    its figures or its trace; else nowhere."""
    if not (settings.stats or settings.trace):
        return QUIET
    return StepStats(settings.stats, settings.trace, report=settings.stats)


def context_length(model: Any) -> int:
    args = getattr(model, "args", None)
    return int(getattr(args, "max_position_embeddings", None) or 4096)


def config_context_length(folder: Path) -> int:
    """context_length as the model's config states it, before the model is loaded."""
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or {}
    return int(config.get("max_position_embeddings") or text.get("max_position_embeddings") or 4096)
