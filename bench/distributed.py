"""A model sharded over ranks: Omni's `omni serve --ranks N` against mlx-lm's own server
sharded the same way (`mlx.launch ... mlx_lm.server`), decode tokens/s at 1 and 8 streams.

    python bench/distributed.py [--model PATH] [--ranks 2] [--backend ring] [--rounds 3]
                                [--tokens 128] [--sharding tensor|pipeline]

Per round, each server in turn (the order alternating), started fresh over MLX's launcher with
the same backend, ranks and sharding (mlx-lm's sharded_load on both sides): a warm-up,
then one streamed greedy chat completion of --tokens tokens (its decode tokens/s: the tokens
after the first over their time), then 8 at once (their tokens over the wall time from the
first request to the last token). Ratios are Omni's over mlx-lm's, the median of each round's.
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

# The model without --model: mlx-lm's llama shards but does not pipeline; Ministral 3 does both.
DEFAULT = {"tensor": "tiny llama", "pipeline": "tiny Ministral 3"}
LAUNCHER = "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"


def start(kind: str, model: str, args: argparse.Namespace, tmp: Path) -> tuple[Any, str]:
    port = free_port()
    if kind == "omni":
        cmd = [sys.executable, "-m", "omni", "serve", "--model", model, "--port", str(port),
               "--db", str(tmp / f"omni-{port}.db"), "--log-level", "warning",
               "--prompt-cache-disk-gb", "0", "--ranks", str(args.ranks),
               "--distributed-backend", args.backend, "--sharding", args.sharding]  # fmt: skip
    else:
        ring = free_port()
        cmd = [sys.executable, "-c", LAUNCHER, "--backend", args.backend, "-n", str(args.ranks),
               "--starting-port", str(ring), "--", sys.executable, "-m", "mlx_lm.server",
               "--model", model, "--port", str(port),
               *(["--pipeline"] if args.sharding == "pipeline" else [])]  # fmt: skip
    # A session of its own: stopping it stops every rank (the launcher alone leaves them).
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
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
    one = stream(base, model, "Tell a long story.", tokens)
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        eight = list(pool.map(lambda i: stream(base, model, f"Story {i}:", tokens), range(8)))
    last = max(s[-1] for s in eight)
    return {
        "one_tok_s": (len(one) - 1) / (one[-1] - one[0]),
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
            for kind in ("omni", "mlx_lm") if i % 2 == 0 else ("mlx_lm", "omni"):
                proc, base = start(kind, model, args, tmp)
                try:
                    row[kind] = measure(base, model, args.tokens)
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait()
            for what in ("one_tok_s", "eight_tok_s"):
                row[f"{what}_ratio"] = row["omni"][what] / row["mlx_lm"][what]
            rows.append(row)
            print(f"round {i}: 1 stream {row['omni']['one_tok_s']:.1f} / "
                  f"{row['mlx_lm']['one_tok_s']:.1f} tok/s ({row['one_tok_s_ratio']:.3f}x), "
                  f"8 streams {row['omni']['eight_tok_s']:.1f} / {row['mlx_lm']['eight_tok_s']:.1f}"
                  f" ({row['eight_tok_s_ratio']:.3f}x)", flush=True)  # fmt: skip
    result = {
        "model": args.model or f"{DEFAULT[args.sharding]} (8 layers, 256 wide, random)",
        "ranks": args.ranks,
        "backend": args.backend,
        "sharding": args.sharding,
        "rounds": rows,
        "one_stream_ratio": statistics.median(r["one_tok_s_ratio"] for r in rows),
        "eight_streams_ratio": statistics.median(r["eight_tok_s_ratio"] for r in rows),
    }
    print(f"omni/mlx_lm, {args.sharding} parallel over {args.ranks} ranks ({args.backend}): "
          "1 stream "
          f"{result['one_stream_ratio']:.3f}x, 8 streams "
          f"{result['eight_streams_ratio']:.3f}x")  # fmt: skip
    write_results("distributed" if args.sharding == "tensor" else "distributed_pipeline", result)


if __name__ == "__main__":
    main()
