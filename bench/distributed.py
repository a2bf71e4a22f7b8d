"""A model sharded over ranks: Omni's `omni serve --ranks N` against mlx-lm's own server
sharded the same way (`mlx.launch ... mlx_lm.server`), tokens/s at 1 and 8 streams.

    python bench/distributed.py [--model PATH] [--ranks 2] [--backend ring] [--rounds 3]
                                [--tokens 128] [--sharding tensor|pipeline]

Per round, each server in turn (each first in turn), started fresh over MLX's launcher with the
same backend, ranks and sharding (mlx-lm's sharded_load on both sides): a warm-up, then one
streamed greedy chat completion of --tokens tokens, then 8 at once (their tokens over the wall
time from the request to the last token). mlx-lm's server runs twice: under mlx.launch as its
own script runs it (each rank's stdin thread spins: on a machine of few cores that costs the
ranks much), and under mlx.launch quieted as Omni runs it (the servers alone compared). Ratios
are Omni's over each, the median of each round's.
Without --model, a random llama of 8 layers, 256 wide (a Ministral 3 for --sharding pipeline;
tensor parallel needs heads that divide by the ranks; it shows the servers' overhead more than
a big model would). Writes bench/out/distributed.json (distributed_pipeline.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import free_port, wait_up  # noqa: E402

from omni.runtime.chat import ranks  # noqa: E402

# The model without --model: mlx-lm's llama shards but does not pipeline; Ministral 3 does both.
DEFAULT = {"tensor": "tiny llama", "pipeline": "tiny Ministral 3"}
LAUNCHER = "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"
# How Omni runs it (omni.runtime.chat.ranks): its per-rank stdin threads no longer spin.
QUIET_LAUNCHER = ranks.LAUNCHER
KINDS = ("omni", "mlx_lm", "mlx_lm_quiet")


def start(kind: str, model: str, args: argparse.Namespace, tmp: Path) -> tuple[Any, str]:
    """`kind`'s server, up: omni, mlx_lm (mlx.launch as its own script runs it, from a terminal
    nobody types in), or mlx_lm_quiet (mlx.launch with Omni's quieting of its stdin threads)."""
    port = free_port()
    if kind == "omni":
        log = tempfile.mkdtemp(dir=tmp)  # a fresh log: no answer replayed from another round
        cmd = [sys.executable, "-m", "omni", "serve", "--model", model, "--port", str(port),
               "--db", str(Path(log) / "omni.db"), "--log-level", "warning",
               "--prompt-cache-disk-gb", "0", "--ranks", str(args.ranks),
               "--distributed-backend", args.backend, "--sharding", args.sharding]  # fmt: skip
    else:
        launcher = QUIET_LAUNCHER if kind == "mlx_lm_quiet" else LAUNCHER
        cmd = [sys.executable, "-c", launcher, "--backend", args.backend, "-n", str(args.ranks),
               "--starting-port", str(free_port()), "--", sys.executable, "-m", "mlx_lm.server",
               "--model", model, "--port", str(port),
               *(["--pipeline"] if args.sharding == "pipeline" else [])]  # fmt: skip
    # A session of its own: stopping it stops every rank (the launcher alone leaves them). Its
    # stdin a pipe nobody writes to, as a terminal nobody types in.
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    wait_up(proc, f"{base}/health", kind)
    return proc, base


def stream(base: str, model: str, text: str, tokens: int) -> list[float]:
    """When each content chunk of a streamed greedy chat completion came."""
    body = {"model": model, "messages": [{"role": "user", "content": text}],
            "max_tokens": tokens, "temperature": 0, "stream": True}  # fmt: skip
    stamps = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"]
            if delta and delta[0].get("delta", {}).get("content"):
                stamps.append(time.perf_counter())
    return stamps


def measure(base: str, model: str, tokens: int) -> dict[str, float]:
    stream(base, model, "warm up", 8)
    asked = time.perf_counter()
    one = stream(base, model, "Tell a long story.", tokens)
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        eight = list(pool.map(lambda i: stream(base, model, f"Story {i}:", tokens), range(8)))
    last = max(s[-1] for s in eight)
    return {
        # Over the request's wall time: a server that sends several tokens in one write (Omni
        # at a fast model's pace) would look faster than it is over first-to-last chunk.
        "one_tok_s": len(one) / (one[-1] - asked),
        "eight_tok_s": sum(len(s) for s in eight) / (last - started),
        "chunks_one": len(one),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--backend", default="ring")
    p.add_argument("--sharding", choices=("tensor", "pipeline"), default="tensor")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model = args.model
        if model is None:
            from omni.testing.llama import build_tiny_llama, build_tiny_ministral3

            build = build_tiny_ministral3 if args.sharding == "pipeline" else build_tiny_llama
            model = str(build(tmp / "tiny", layers=8, hidden=256))
        rows = []
        for i in range(args.rounds):
            row: dict[str, Any] = {}
            for kind in KINDS[i % 3 :] + KINDS[: i % 3]:  # each first in turn
                proc, base = start(kind, model, args, tmp)
                try:
                    row[kind] = measure(base, model, args.tokens)
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait()
            for base_kind in KINDS[1:]:
                for what in ("one_tok_s", "eight_tok_s"):
                    row[f"{what}_ratio_{base_kind}"] = row["omni"][what] / row[base_kind][what]
            rows.append(row)
            print(f"round {i}: 1 stream " + " / ".join(f"{row[k]['one_tok_s']:.1f}" for k in KINDS)
                  + " tok/s, 8 streams " + " / ".join(f"{row[k]['eight_tok_s']:.1f}" for k in KINDS)
                  + " (omni / mlx_lm / mlx_lm_quiet)", flush=True)  # fmt: skip
    result: dict[str, Any] = {
        "model": args.model or f"{DEFAULT[args.sharding]} (8 layers, 256 wide, random)",
        "ranks": args.ranks,
        "backend": args.backend,
        "sharding": args.sharding,
        "rounds": rows,
    }
    for base_kind in KINDS[1:]:
        for what, name in (("one_tok_s", "one_stream"), ("eight_tok_s", "eight_streams")):
            ratios = [r[f"{what}_ratio_{base_kind}"] for r in rows]
            result[f"{name}_ratio_{base_kind}"] = statistics.median(ratios)
        print(f"omni/{base_kind}, {args.sharding} parallel over {args.ranks} ranks "
              f"({args.backend}): 1 stream {result[f'one_stream_ratio_{base_kind}']:.3f}x, "
              f"8 streams {result[f'eight_streams_ratio_{base_kind}']:.3f}x")  # fmt: skip
    write_results("distributed" if args.sharding == "tensor" else "distributed_pipeline", result)


if __name__ == "__main__":
    main()
