"""Prefix-cache lookup: the time to find the cached KV prefix for a new prompt, Omni's
PrefixCache against mlx-lm's LRUPromptCache (what Omni used before), both holding the same
entries. The lookup runs in the engine process between two decode steps, once per new request.

    python bench/prefix_lookup.py [--entries 16,64] [--tokens 180] [--shared 10] [--runs 50]

Each store holds --entries caches of --tokens tokens (bf16 KV, Llama-3.2-1B's 16 layers x 8
heads x 64) that share their first --shared tokens, as prompts that share only a chat
template's start do; the query shares those too. Prints the mean lookup time per store and
their ratio; writes bench/out/prefix_lookup.json and .png.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import Lines, write_results  # noqa: E402


def kv(tokens: int) -> list[Any]:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    layers = []
    for _ in range(16):
        cache = KVCache()
        zeros = mx.zeros((1, 8, tokens, 64), mx.bfloat16)
        cache.update_and_fetch(zeros, zeros)
        layers.append(cache)
    mx.eval([c.state for c in layers])
    return layers


def timed(lookup: Any, query: list[int]) -> float:
    start = time.perf_counter()
    for _ in range(ARGS.runs):
        lookup(query)
    return (time.perf_counter() - start) / ARGS.runs * 1000


def main() -> None:
    from mlx_lm.models.cache import LRUPromptCache

    from omni.runtime.generation import PrefixCache

    rng = random.Random(0)
    shared = list(range(ARGS.shared))
    results: dict[str, dict[str, float]] = {}
    for n in ARGS.entries:
        theirs = LRUPromptCache(max_size=n, max_bytes=1 << 40)
        ours = PrefixCache(None, n, 1 << 40)
        for _ in range(n):
            tokens = shared + [rng.randrange(1000, 50000) for _ in range(ARGS.tokens - ARGS.shared)]
            cache = kv(ARGS.tokens)
            theirs.insert_cache("", tokens, cache)
            ours.insert("", tokens, cache)
        query = shared + [rng.randrange(1000, 50000) for _ in range(40)]
        results[str(n)] = {
            "mlx_lm_ms": timed(lambda q, s=theirs: s.fetch_nearest_cache("", q), query),
            "omni_ms": timed(lambda q, s=ours: s.nearest("", q), query),
        }
        r = results[str(n)]
        print(
            f"{n:4d} entries: mlx-lm LRUPromptCache {r['mlx_lm_ms']:6.2f} ms,"
            f" Omni PrefixCache {r['omni_ms']:6.2f} ms ({r['mlx_lm_ms'] / r['omni_ms']:.1f}x)"
        )
    xs = [float(n) for n in ARGS.entries]
    theirs_ms = [results[str(n)]["mlx_lm_ms"] for n in ARGS.entries]
    ours_ms = [results[str(n)]["omni_ms"] for n in ARGS.entries]
    write_results(
        "prefix_lookup",
        {"args": vars(ARGS), "results": results},
        [
            Lines(
                f"lookup, {ARGS.tokens}-token entries sharing {ARGS.shared}",
                "entries held",
                "ms per lookup",
                {"mlx-lm LRUPromptCache": (xs, theirs_ms), "Omni PrefixCache": (xs, ours_ms)},
            )
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", default="16,64")
    parser.add_argument("--tokens", type=int, default=180)
    parser.add_argument("--shared", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    ARGS = parser.parse_args()
    ARGS.entries = [int(n) for n in ARGS.entries.split(",")]
    main()
