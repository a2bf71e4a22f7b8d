"""Prefill with MLX's cuDNN attention on and off (MLX's CUDA build): a server sees a new prompt
length with nearly every request, and groups of prompts of new lengths in the batch.

    python bench/attention.py [--model PATH] [--lengths 97,211,...] [--groups 6] [--tokens 128]

For each setting of MLX_CUDA_USE_CUDNN_SDPA (1 is MLX's default, 0 what Omni's engine uses
unless it is set), a fresh process with raw mlx-lm (no Omni) measures, after a warm-up:
1. one prompt of each --lengths, none seen before: the time of its prefill and first token;
2. the same lengths again (every shape seen once);
3. --groups groups of 8 prompts of 30-70 tokens through BatchGenerator (its right padding and
   masks, as a served batch): the time until all 8 have their first token, each group's
   lengths new;
4. decode tokens/s of one stream, --tokens tokens.
On a machine without CUDA both settings run the same code (the variable is CUDA's alone).
Prints a table; writes bench/out/attention.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import Bars, Lines, write_results  # noqa: E402

SETTINGS = ("1", "0")  # MLX_CUDA_USE_CUDNN_SDPA: MLX's default, Omni's engine's


def child(model_path: str) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm import load, stream_generate
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.models.cache import make_prompt_cache

    model, tokenizer = load(model_path)
    vocab = int(getattr(model.args, "vocab_size", 1000))
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(10, vocab - 10) for _ in range(n)]

    def first_token(prompt: list[int]) -> float:
        start = time.perf_counter()
        cache = make_prompt_cache(model)
        logits = model(mx.array(prompt)[None], cache=cache)
        mx.eval(mx.argmax(logits[:, -1, :], axis=-1))
        return time.perf_counter() - start

    first_token(tokens(64))  # kernels built once, outside every timing
    first_token(tokens(64))
    new = {n: first_token(tokens(n)) for n in ARGS.lengths}
    seen = {n: first_token(tokens(n)) for n in ARGS.lengths}

    gen = BatchGenerator(model, stop_tokens=[], completion_batch_size=8, prefill_batch_size=8)
    groups = []
    try:
        for g in range(ARGS.groups + 1):
            prompts = [tokens(rng.randrange(30, 71)) for _ in range(8)]
            start = time.perf_counter()
            uids = set(gen.insert(prompts, max_tokens=[1] * 8))
            while uids:
                for r in gen.next_generated():
                    uids.discard(r.uid)
            if g > 0:  # the first group builds the batch path's kernels
                groups.append(time.perf_counter() - start)
    finally:
        gen.close()

    prompt = tokens(32)
    rates = []
    for _ in range(2):
        steps = list(stream_generate(model, tokenizer, prompt, max_tokens=ARGS.tokens))
        rates.append(steps[-1].generation_tps)
    return {
        "new_length_s": new,
        "seen_length_s": seen,
        "group_of_8_s": groups,
        "decode_tps": max(rates),
        "device": str(mx.default_device()),
    }


def main() -> None:
    from omni.cli import omni_home
    from omni.runtime.model_source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    results: dict[str, dict[str, Any]] = {}
    for setting in SETTINGS:
        env = {**os.environ, "MLX_CUDA_USE_CUDNN_SDPA": setting}
        cmd = [sys.executable, __file__, "--child", "--model", source.path]
        cmd += ["--lengths", ",".join(map(str, ARGS.lengths)), "--groups", str(ARGS.groups)]
        cmd += ["--tokens", str(ARGS.tokens)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        results[setting] = json.loads(done.stdout.strip().splitlines()[-1])

    on, off = results["1"], results["0"]
    print(f"model {source.model_id} on {on['device']}; cuDNN attention on (MLX's default) / off")
    print(f"{'prompt tokens':>13} | {'new length ms':^17} | {'seen length ms':^17}")
    for n in ARGS.lengths:
        k = str(n)
        print(
            f"{n:>13} | {1000 * on['new_length_s'][k]:>8.1f}{1000 * off['new_length_s'][k]:>9.1f}"
            f" | {1000 * on['seen_length_s'][k]:>8.1f}{1000 * off['seen_length_s'][k]:>9.1f}"
        )
    total = {s: sum(r["new_length_s"].values()) for s, r in results.items()}
    group = {s: statistics.median(r["group_of_8_s"]) for s, r in results.items()}
    print(f"all new lengths, s: on {total['1']:.3f}, off {total['0']:.3f}")
    print(
        f"a group of 8 new prompts, first tokens, median ms: on {1000 * group['1']:.1f}, "
        f"off {1000 * group['0']:.1f}"
    )
    print(f"decode tok/s, one stream: on {on['decode_tps']:.1f}, off {off['decode_tps']:.1f}")

    result = {"model": source.model_id, "lengths": ARGS.lengths, "cudnn_sdpa": results}
    lengths = ARGS.lengths
    label = {"1": "cuDNN on", "0": "cuDNN off"}
    series = {}
    for s, r in results.items():
        series[f"{label[s]}, new length"] = (
            lengths,
            [1000 * r["new_length_s"][str(n)] for n in lengths],
        )
        series[f"{label[s]}, seen"] = (
            lengths,
            [1000 * r["seen_length_s"][str(n)] for n in lengths],
        )
    write_results(
        "attention",
        result,
        [
            Lines("prefill + first token, one prompt", "prompt tokens", "ms", series, logy=True),
            Bars(
                "8 new prompts at once (median)",
                "ms",
                {label[s]: 1000 * g for s, g in group.items()},
            ),
            Bars(
                "decode, one stream",
                "tokens/s",
                {label[s]: r["decode_tps"] for s, r in results.items()},
            ),
        ],
        f"MLX cuDNN attention: {source.model_id} on {on['device']}",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument(
        "--lengths",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[97, 211, 389, 613, 1021, 1543, 2087, 3001, 4093],
        help="prompt lengths, each new to the process when first measured",
    )
    p.add_argument("--groups", type=int, default=6, help="groups of 8 short prompts")
    p.add_argument("--tokens", type=int, default=128, help="decode length, one stream")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ARGS = p.parse_args()
    if ARGS.child:
        print(json.dumps(child(ARGS.model)))
    else:
        main()
