"""The prefix cache's disk tier: a conversation's 11th turn after a restart, read from disk,
against a cold prefill of the same prompt; and a load from disk against a prefill, per 1k tokens.

    python bench/prefix_disk.py [--model PATH_OR_ID] [--prefix-tokens 2000] [--rounds 5]
                                [--block-tokens 48] [--write-rounds 21]
                                [--skip restart per_1k writes]

A conversation (instructions of --prefix-tokens tokens, then 10 short turns, greedy, 8 output
tokens each) is held once against `omni serve` with a disk tier. Then, per round, two fresh
servers in turn (the order alternating): `disk`, on the same log and disk folder, where the 11th
turn's prefix is on disk and memory is empty; `cold`, the same log with no disk tier, where the
11th turn is prefilled whole. Each measures the 11th turn's time to first token (streamed,
`previous_response_id` on the 10th); the ratio is the median of each round's disk/cold. The
target: at most 0.2x where prefill is slow (a CPU), never above 1.0x on a GPU (where the tier
loads nothing it measured slower than a prefill).

Per 1k tokens: a load of the largest entry those servers wrote (checksum and all, in-process,
median of --rounds) against the cold servers' prefill (their time to first token over the
prompt's tokens).

What the writes cost running streams, in-process on the engine's thread: a greedy decode in
blocks of --block-tokens, alternating blocks with and without a write of a --prefix-tokens // 4
token cache handed to the tier at their start; the median of each pair's decode tokens/s ratio
(--write-rounds pairs). The last entry written is loaded back and must give the next token the
same logits. Writes bench/out/prefix_disk.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402

WORDS = "the lighthouse keeper logs the weather and the ships that pass in the night".split()
TURNS = 10


def instructions(tokens: int) -> str:
    """About `tokens` tokens of text (a word and its space is about 1.3 tokens)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(int(tokens / 1.3)))


def body(model: str, text: str, previous: str | None, prefix: str, stream: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "model": model,
        "instructions": prefix,
        "input": text,
        "max_output_tokens": 8,
        "temperature": 0,
        "stream": stream,
    }
    if previous is not None:
        fields["previous_response_id"] = previous
    return fields


def hold(base: str, model: str, prefix: str) -> str:
    """The conversation's first 10 turns; the 10th response's id."""
    previous = None
    with httpx.Client(base_url=base, timeout=3600) as http:
        for i in range(TURNS):
            r = http.post(
                "/v1/responses", json=body(model, f"Turn {i}: go on.", previous, prefix, False)
            )
            r.raise_for_status()
            previous = r.json()["id"]
    assert previous is not None
    return previous


def eleventh(base: str, model: str, previous: str, prefix: str) -> dict[str, float]:
    """The 11th turn, streamed: its time to first token and what its usage says."""
    request = body(model, f"Turn {TURNS}: go on.", previous, prefix, True)
    started = time.perf_counter()
    first = None
    usage: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=3600) as http:
        with http.stream("POST", "/v1/responses", json=request) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if first is None and event["type"] == "response.output_text.delta":
                    first = time.perf_counter() - started
                if event["type"] in ("response.completed", "response.incomplete"):
                    usage = event["response"]["usage"]
    details = usage.get("input_tokens_details") or {}
    return {
        "ttft_s": first if first is not None else time.perf_counter() - started,
        "input_tokens": usage.get("input_tokens", 0),
        "cached": details.get("cached_tokens", 0),
        "from_disk": details.get("omni_disk_cached_tokens", 0),
    }


def served(model_path: str, db: Path, kv: Path | None) -> tuple[Any, str]:
    flags = ["--temp", "0"]
    flags += ["--prompt-cache-dir", str(kv), "--prompt-cache-disk-gb", "8"] if kv else []
    flags += [] if kv else ["--prompt-cache-disk-gb", "0"]
    return start_omni(model_path, db, *flags)


def restarts(model_path: str, model: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    db, kv = tmp / "omni.db", tmp / "kv"
    prefix = instructions(args.prefix_tokens)
    proc, base = served(model_path, db, kv)
    try:
        previous = hold(base, model, prefix)
    finally:
        proc.terminate()
        proc.wait()
    rows: list[dict[str, Any]] = []
    for i in range(args.rounds):
        row: dict[str, Any] = {}
        for kind in ("disk", "cold") if i % 2 == 0 else ("cold", "disk"):
            copy = tmp / f"round-{i}-{kind}.db"  # the log as the conversation left it
            shutil.copy(db, copy)
            proc, base = served(model_path, copy, kv if kind == "disk" else None)
            try:
                row[kind] = eleventh(base, model, previous, prefix)
            finally:
                proc.terminate()
                proc.wait()
        row["ratio"] = row["disk"]["ttft_s"] / row["cold"]["ttft_s"]
        rows.append(row)
        print(
            f"round {i}: disk {row['disk']['ttft_s']:.3f} s ({row['disk']['from_disk']} tokens"
            f" from disk of {row['disk']['input_tokens']}), cold {row['cold']['ttft_s']:.3f} s,"
            f" disk/cold {row['ratio']:.3f}",
            flush=True,
        )
    return {"rounds": rows, "ratio": statistics.median(r["ratio"] for r in rows)}


def per_1k(tier: Any, written: Any, cold: list[dict[str, Any]], rounds: int) -> dict[str, float]:
    """A load of `written` (a DiskEntry) from the tier (checksum and all), timed in-process,
    per 1k tokens; against the cold servers' prefill per 1k tokens (their 11th turn's time to
    first token over its prompt: the engine's own prefill, with its BLAS)."""
    loads = []
    for _ in range(rounds):
        start = time.perf_counter()
        assert tier.load(written, len(written.tokens)) is not None
        loads.append(time.perf_counter() - start)
    load_s = statistics.median(loads) / (len(written.tokens) / 1000)
    prefill = statistics.median(c["ttft_s"] / c["input_tokens"] * 1000 for c in cold)
    print(f"per 1k tokens: prefill {prefill:.4f} s, load {load_s:.4f} s ({load_s / prefill:.4f}x)")
    return {
        "prefill_s_per_1k": prefill,
        "load_s_per_1k": load_s,
        "load_to_prefill": load_s / prefill,
        "entry_tokens": len(written.tokens),
    }


def in_process(
    model_path: str, tmp: Path, args: argparse.Namespace, cold: list[dict[str, Any]]
) -> dict[str, Any]:
    """In-process, on one thread as the engine runs: a greedy decode in blocks of
    --block-tokens, alternating blocks with and without a disk write handed over at their start
    (the prefix cache's `put`: a copy into host memory here, the file by the tier's thread);
    the ratio of each pair's decode tokens/s, its median. Then the last entry is loaded back
    and its next-token logits compared with the cache it was written from."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    from omni.runtime.chat.kv_disk import DiskTier

    model, tokenizer = load(model_path)[:2]
    stream = mx.new_stream(mx.default_device())  # the engine's own, as in its worker
    size = args.prefix_tokens // 4
    ids = tokenizer.encode(instructions(size))[:size]

    def prefilled(tokens: list[int]) -> list[Any]:
        cache = make_prompt_cache(model)
        with mx.stream(stream):
            mx.eval(model(mx.array(tokens)[None], cache=cache))
        return cache

    written = prefilled(ids)  # what each write hands over
    tier = DiskTier(tmp / "kv-writes", "bench", 64 << 30)
    tier.rates.gpu = False
    result: dict[str, Any] = {}
    if cold:  # a prompt's cache of the 11th turn's size, written, then loaded
        whole = tokenizer.encode(instructions(args.prefix_tokens))
        assert tier.put("per-1k", whole, prefilled(whole))
        tier.flush()
        [entry] = tier.entries()
        result["per_1k"] = per_1k(tier, entry, cold, args.rounds)
    if "writes" in args.skip:
        tier.close()
        return result

    def block(write: int | None) -> tuple[float, float]:
        cache = prefilled(ids[:16])
        y = mx.array([[ids[16]]])
        start = time.perf_counter()
        if write is not None:
            assert tier.put(f"w{write}", ids, written)
        handed = time.perf_counter() - start
        with mx.stream(stream):
            for _ in range(args.block_tokens):
                y = mx.argmax(model(y, cache=cache)[:, -1:], axis=-1)
                mx.eval(y)
        return args.block_tokens / (time.perf_counter() - start), handed

    block(None)  # warm-up
    rows = []
    for i in range(args.write_rounds):
        row: dict[str, float] = {}
        for kind in ("disk", "none") if i % 2 == 0 else ("none", "disk"):
            row[kind], handed = block(i if kind == "disk" else None)
            if kind == "disk":
                row["put_s"] = handed
                tier.flush()  # the next block starts with no write going on
        row["ratio"] = row["disk"] / row["none"]
        rows.append(row)
    same = logits_match(model, stream, tier, ids, written)
    tier.close()
    ratio = statistics.median(r["ratio"] for r in rows)
    put_ms = statistics.median(r["put_s"] for r in rows) * 1000
    print(f"writes: {len(rows)} pairs of {args.block_tokens}-token blocks, a {len(ids)}-token"
          f" cache written per block: decode {ratio:.4f}x; put {put_ms:.2f} ms on the engine's"
          f" thread; loaded back, next-token logits identical: {same}", flush=True)  # fmt: skip
    result["writes"] = {
        "rounds": rows,
        "ratio": ratio,
        "put_ms": put_ms,
        "cache_tokens": len(ids),
        "block_tokens": args.block_tokens,
        "loaded_logits_identical": same,
    }
    return result


def logits_match(model: Any, stream: Any, tier: Any, ids: list[int], cache: list[Any]) -> bool:
    """Whether a written entry, loaded back, gives the next token the logits its source does."""
    import mlx.core as mx

    writes = [e for e in tier.entries() if e.namespace != "per-1k"]
    entry = max(writes, key=lambda e: e.side.created)
    loaded = tier.load(entry, len(ids))
    assert loaded is not None
    step = mx.array([[ids[-1]]])
    with mx.stream(stream):
        a = model(step, cache=loaded)
        b = model(step, cache=cache)
        return bool(mx.array_equal(a, b).item())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="a model path or id (default: a tiny llama)")
    p.add_argument("--prefix-tokens", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-tokens", type=int, default=48, help="decode tokens per block")
    p.add_argument("--write-rounds", type=int, default=21, help="pairs of blocks")
    p.add_argument("--skip", nargs="*", default=[], choices=["restart", "per_1k", "writes"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model_path, model = model_or_tiny(args.model, tmp)
        result: dict[str, Any] = {"model": model, "prefix_tokens": args.prefix_tokens}
        if "restart" not in args.skip:
            result["restart"] = restarts(model_path, model, tmp, args)
            ratio = result["restart"]["ratio"]
            print(f"11th turn after a restart, disk/cold time to first token: {ratio:.3f}x")
        cold = []
        if "restart" not in args.skip and "per_1k" not in args.skip:
            cold = [r["cold"] for r in result["restart"]["rounds"]]
        if cold or "writes" not in args.skip:
            result.update(in_process(model_path, tmp, args, cold))
        if "writes" in result:
            cost = result["writes"]["ratio"]
            print(f"decode tokens/s with the disk tier's writes / without: {cost:.3f}x")
    write_results("prefix_disk", result)


if __name__ == "__main__":
    main()
