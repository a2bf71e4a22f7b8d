"""Prefill chunk sizes: one long prompt's prefill tokens/s and one chunk's time, per size.

In-process, the engine's own way: a forward pass of a chunk on a plain KV cache, then evaluated.

For each size: the prompt's prefill tokens/s, its ratio to the fastest size measured in the
same run, and one chunk's time (what a running stream waits between two of its tokens, beside
its own decode step). The engine's chunk on a device (omni.runtime.chat.worker.prefill_chunk) is the
smallest size within `--within` of the fastest: as fast a prefill, the shortest hold.

    python bench/chunks.py [--model PATH] [--prompt-tokens 2048] [--sizes 64,128,...] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def prefill_s(model: object, prompt: list[int], chunk: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    began = time.perf_counter()
    for i in range(0, len(prompt), chunk):
        model(mx.array(prompt[i : i + chunk])[None], cache=cache)  # type: ignore[operator]
        mx.eval([c.state for c in cache])
    return time.perf_counter() - began


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="an mlx-lm model folder (default: Omni's default model)")
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--sizes", default="32,64,128,256,512,1024,2048")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--within", type=float, default=0.9, help="of the fastest size's tokens/s")
    p.add_argument("--out", default=str(HERE / "out" / "chunks.json"))
    args = p.parse_args()

    from mlx_lm import load

    from omni.runtime.chat.worker import on_gpu, prefill_chunk, use_mlx_settings
    from omni.runtime.loading import weights
    from omni.runtime.platform import blas
    from omni.settings import engine_knobs

    # The engine's own BLAS (preloaded, so this script runs again in a process that has it).
    library = blas.preload(blas.AUTO)
    if library and os.environ.get("LD_PRELOAD") != library:
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "LD_PRELOAD": library}
        )

    use_mlx_settings()
    path = args.model
    if path is None:
        from omni.cli.options import omni_home
        from omni.runtime.loading.default_model import ensure_default_model

        path = str(ensure_default_model(omni_home(), print))
    model = load(path)[0]
    library = None if on_gpu() else blas.in_use()
    if weights.choose(weights.AUTO, model, blas.optimized(library)) == weights.FLOAT32:
        model = weights.to_float32(model)  # the engine's weights, as `--weights auto` picks
    print(f"BLAS {blas.describe(library)}, weights {weights.describe(model)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    vocab = int(model.args.vocab_size) - 8  # a token past the vocabulary crashes the model
    prompt = [1 + (k * 7919) % vocab for k in range(args.prompt_tokens)]
    prefill_s(model, prompt[:256], 256)  # kernels built, memory allocated
    seconds: dict[int, list[float]] = {s: [] for s in sizes}
    for r in range(args.rounds):  # sizes alternate within a round: a host's drift hits all
        order = sizes if r % 2 == 0 else sizes[::-1]
        for size in order:
            # A distinct prompt each time: nothing is cached between runs anyway.
            seconds[size].append(prefill_s(model, [(t + r) % vocab + 1 for t in prompt], size))
    rows = []
    for size in sizes:
        s = statistics.median(seconds[size])
        chunks = -(-args.prompt_tokens // size)
        rows.append(
            {
                "size": size,
                "prefill_s": s,
                "tok_s": args.prompt_tokens / s,
                "chunk_ms": 1000 * s / chunks,
            }
        )
    best = max(r["tok_s"] for r in rows)
    pick = min((r for r in rows if r["tok_s"] >= args.within * best), key=lambda r: r["size"])
    print(
        f"{'gpu' if on_gpu() else 'cpu'}, {path}, a prompt of {args.prompt_tokens} tokens, "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'chunk':>6} {'tok/s':>9} {'vs fastest':>10} {'one chunk ms':>13}")
    for r in rows:
        r["vs_fastest"] = r["tok_s"] / best
        print(f"{r['size']:>6} {r['tok_s']:>9.1f} {r['vs_fastest']:>10.3f} {r['chunk_ms']:>13.1f}")
    print(
        f"smallest within {args.within:.0%} of the fastest: {pick['size']} "
        f"(the engine's here: {prefill_chunk(engine_knobs()['prefill_chunk'])})"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "model": path,
                "gpu": on_gpu(),
                "rows": rows,
                "prompt_tokens": args.prompt_tokens,
                "pick": pick["size"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
