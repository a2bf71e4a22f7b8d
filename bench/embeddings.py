"""Embeddings throughput: inputs/s at batch 1 and 64 through Omni's MLXEmbedder against calling
mlx-embeddings directly in the same run, and the model's load time.

    python bench/embeddings.py [--model FOLDER] [--rounds 5] [--single 64] [--batches 4]

The model is the default embedding model (all-MiniLM-L6-v2, fetched into OMNI_HOME once)
unless --model names a folder. A round measures, in turn: --single requests of one input
each, then --batches requests of 64 inputs, through MLXEmbedder (tokenized in this process,
embedded in the model's own process, answered as lists of floats); then the same inputs
through `mlx_embeddings.generate` in this process (tokenized, one padded pass, evaluated).
The two alternate within a round and ratios are medians of per-round ratios; on MLX's CPU
build both run on the BLAS the embedder preloads (this script runs again with it). Load time:
MLXEmbedder.start() (a process started, the model and its tokenizer loaded, a warm-up pass)
against mlx_embeddings.load. Writes bench/out/embeddings.json and, for a run on the default
model, bench/results/<cpu|gpu>_embeddings.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from _plot import Bars, write_results  # noqa: E402

from omni.runtime.embeddings.engine import MLXEmbedder  # noqa: E402

WORDS = (
    "the event log is the truth and every read is a projection of it a response is an "
    "append only stream of the exact events a client is sent local retrieval needs vectors "
    "next to chat on one machine with one model process a model of its own"
).split()


def texts(n: int, seed: int = 0) -> list[str]:
    """`n` sentences of 6 to 40 words: lengths vary, as a retrieval corpus's chunks do."""
    out = []
    for i in range(n):
        k = (i * 7919 + seed) % len(WORDS)
        length = 6 + (i * 37 + seed) % 35
        out.append(" ".join(WORDS[(k + j * 3) % len(WORDS)] for j in range(length)))
    return out


def omni_rates(
    embedder: MLXEmbedder, single: list[str], batches: list[list[str]]
) -> dict[str, float]:
    async def run() -> dict[str, float]:
        start = time.perf_counter()
        for text in single:
            await embedder.embed(embedder.tokenize([text]))
        one = len(single) / (time.perf_counter() - start)
        start = time.perf_counter()
        for batch in batches:
            await embedder.embed(embedder.tokenize(batch))
        many = sum(map(len, batches)) / (time.perf_counter() - start)
        return {"batch1_inputs_per_s": one, "batch64_inputs_per_s": many}

    return asyncio.run(run())


def direct_rates(
    model: Any, tokenizer: Any, single: list[str], batches: list[list[str]]
) -> dict[str, float]:
    import mlx.core as mx
    from mlx_embeddings import generate

    def embed(batch: list[str]) -> None:
        mx.eval(generate(model, tokenizer, texts=batch).text_embeds)

    start = time.perf_counter()
    for text in single:
        embed([text])
    one = len(single) / (time.perf_counter() - start)
    start = time.perf_counter()
    for batch in batches:
        embed(batch)
    many = sum(map(len, batches)) / (time.perf_counter() - start)
    return {"batch1_inputs_per_s": one, "batch64_inputs_per_s": many}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="an embedding model's folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--single", type=int, default=64, help="requests of one input a round")
    parser.add_argument("--batches", type=int, default=4, help="requests of 64 inputs a round")
    args = parser.parse_args()

    # The BLAS MLXEmbedder's process preloads, in this one too (so this script runs again in a
    # process that has it): both sides of a ratio run the same kernels.
    from omni.runtime.platform import blas

    library = blas.preload(blas.AUTO)
    if library and os.environ.get("LD_PRELOAD") != library:
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "LD_PRELOAD": library}
        )
    import mlx.core as mx
    from mlx_embeddings import load

    default = args.model is None
    if default:
        from omni.cli.options import omni_home
        from omni.runtime.embeddings.default import ensure_default_embedding

        path = str(ensure_default_embedding(omni_home(), print))
    else:
        path = str(Path(args.model).resolve())
    device = "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"

    start = time.perf_counter()
    embedder = MLXEmbedder(path, Path(path).name)
    embedder.start()
    omni_load = time.perf_counter() - start
    start = time.perf_counter()
    model, tokenizer = load(path)
    mx.eval(model.parameters())
    direct_load = time.perf_counter() - start

    single = texts(args.single)
    batches = [texts(64, seed=b + 1) for b in range(args.batches)]
    omni_rates(embedder, single[:4], batches[:1])  # warm: kernels built, memory allocated
    direct_rates(model, tokenizer, single[:4], batches[:1])
    runs = []
    try:
        for r in range(args.rounds):
            pair = {}
            # Who goes first alternates: a host's drift within a round falls on both.
            order = ("omni", "direct") if r % 2 == 0 else ("direct", "omni")
            for side in order:
                if side == "omni":
                    pair["omni"] = omni_rates(embedder, single, batches)
                else:
                    pair["direct"] = direct_rates(model, tokenizer, single, batches)
            runs.append(pair)
            print(
                f"round {r + 1}: batch 1 {pair['omni']['batch1_inputs_per_s']:.1f} vs "
                f"{pair['direct']['batch1_inputs_per_s']:.1f} inputs/s, batch 64 "
                f"{pair['omni']['batch64_inputs_per_s']:.1f} vs "
                f"{pair['direct']['batch64_inputs_per_s']:.1f}"
            )
    finally:
        embedder.close()

    keys = ("batch1_inputs_per_s", "batch64_inputs_per_s")
    medians = {
        side: {k: round(statistics.median(run[side][k] for run in runs), 1) for k in keys}
        for side in ("omni", "direct")
    }
    ratios = {}
    for k in keys:
        per = [run["omni"][k] / run["direct"][k] for run in runs]
        ratios[k] = {
            "median": round(statistics.median(per), 3),
            "min": round(min(per), 3),
            "max": round(max(per), 3),
        }
    result = {
        "model": Path(path).name,
        "device": device,
        "blas": blas.describe(blas.in_use()),
        "threads": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "rounds": args.rounds,
        "single_requests": args.single,
        "batch_requests": args.batches,
        "load_s": {"omni": round(omni_load, 3), "direct": round(direct_load, 3)},
        "medians": medians,
        "ratios": ratios,
        "runs": runs,
    }
    print(f"\nload: MLXEmbedder {omni_load:.2f} s, mlx_embeddings.load {direct_load:.2f} s")
    for k in keys:
        r = ratios[k]
        print(
            f"{k}: Omni {medians['omni'][k]}, direct {medians['direct'][k]}: "
            f"{r['median']:.3f}x ({r['min']:.3f}-{r['max']:.3f})"
        )
    write_results(
        "embeddings",
        result,
        [
            Bars("batch 1 inputs/s", "inputs/s", {s: m[keys[0]] for s, m in medians.items()}),
            Bars("batch 64 inputs/s", "inputs/s", {s: m[keys[1]] for s, m in medians.items()}),
        ],
        f"Embeddings: {Path(path).name} on the {device}",
    )
    if default:
        (ROOT / "results").mkdir(exist_ok=True)
        kept = ROOT / "results" / f"{device}_embeddings.json"
        shutil.copy(ROOT / "out" / "embeddings.json", kept)
        print(f"wrote {kept}")


if __name__ == "__main__":
    main()
