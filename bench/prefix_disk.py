"""The prefix cache's disk tier: a conversation's 11th turn after a restart, read from disk,
against a cold prefill of the same prompt; and a load from disk against a prefill, per 1k tokens.

    python bench/prefix_disk.py [--model PATH_OR_ID] [--prefix-tokens 2000] [--rounds 5]
                                [--decode-tokens 300] [--skip restart per_1k writes]

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

What the writes cost running streams: one stream decodes --decode-tokens tokens while another
client sends a new prompt of --prefix-tokens // 4 tokens after each of its answers (each a cache
the tier writes, on a server with a disk tier; none without), rounds alternating the two
servers; the stream's decode tokens/s (its tokens after the first over their time), the ratio
the median of each round's with/without. Writes bench/out/prefix_disk.json.
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


def per_1k(kv: Path, args: argparse.Namespace, cold: list[dict[str, Any]]) -> dict[str, float]:
    """A load of the largest entry the restart rounds' servers wrote to the disk tier
    (checksum and all), timed in-process, per 1k tokens; against the cold servers' prefill
    per 1k tokens (their 11th turn's time to first token over its prompt: the engine's own
    prefill, with its BLAS)."""
    from omni.runtime.chat.kv_disk import DiskTier

    [folder] = [d for d in kv.iterdir() if d.is_dir()]  # one model: one key
    tier = DiskTier(kv, folder.name, 8 << 30)
    tier.scan()
    tier.rates.gpu = False
    entry = max(tier.entries(), key=lambda e: len(e.tokens))
    loads = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        assert tier.load(entry, len(entry.tokens)) is not None
        loads.append(time.perf_counter() - start)
    tier.close()
    load_s = statistics.median(loads) / (len(entry.tokens) / 1000)
    prefill = statistics.median(c["ttft_s"] / c["input_tokens"] * 1000 for c in cold)
    print(f"per 1k tokens: prefill {prefill:.4f} s, load {load_s:.4f} s ({load_s / prefill:.4f}x)")
    return {
        "prefill_s_per_1k": prefill,
        "load_s_per_1k": load_s,
        "load_to_prefill": load_s / prefill,
    }


def decode_rate(base: str, model: str, tokens: int, others: int) -> float:
    """One stream's decode tokens/s while another client sends prompts of `others` tokens."""
    import threading

    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=base, timeout=3600) as http:
            i = 0
            while not stop.is_set():
                text = f"{i} " + instructions(others)
                http.post(
                    "/v1/responses", json=body(model, text, None, "", False)
                ).raise_for_status()
                i += 1

    other = threading.Thread(target=traffic)
    other.start()
    request = {"model": model, "input": "Tell a long story.", "max_output_tokens": tokens,
               "temperature": 0, "stream": True, "logit_bias": {}}  # fmt: skip
    stamps: list[float] = []
    try:
        with httpx.Client(base_url=base, timeout=3600) as http:
            with http.stream("POST", "/v1/responses", json=request) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and '"response.output_text.delta"' in line:
                        stamps.append(time.perf_counter())
    finally:
        stop.set()
        other.join()
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def writes_cost(model_path: str, model: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for i in range(args.rounds):
        row: dict[str, float] = {}
        for kind in ("disk", "none") if i % 2 == 0 else ("none", "disk"):
            kv = tmp / f"kv-writes-{i}" if kind == "disk" else None
            proc, base = served(model_path, tmp / f"writes-{i}-{kind}.db", kv)
            try:
                row[kind] = decode_rate(base, model, args.decode_tokens, args.prefix_tokens // 4)
            finally:
                proc.terminate()
                proc.wait()
        row["ratio"] = row["disk"] / row["none"]
        rows.append(row)
        print(f"writes round {i}: decode {row['disk']:.1f} tok/s with the disk tier,"
              f" {row['none']:.1f} without: {row['ratio']:.3f}x", flush=True)  # fmt: skip
    return {"rounds": rows, "ratio": statistics.median(r["ratio"] for r in rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="a model path or id (default: a tiny llama)")
    p.add_argument("--prefix-tokens", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--decode-tokens", type=int, default=300)
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
        if "restart" not in args.skip and "per_1k" not in args.skip:
            cold = [r["cold"] for r in result["restart"]["rounds"]]
            result["per_1k"] = per_1k(tmp / "kv", args, cold)
        if "writes" not in args.skip:
            result["writes"] = writes_cost(model_path, model, tmp, args)
            cost = result["writes"]["ratio"]
            print(f"decode tokens/s with the disk tier's writes / without: {cost:.3f}x")
    write_results("prefix_disk", result)


if __name__ == "__main__":
    main()
