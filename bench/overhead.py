"""Single-stream overhead: a streamed /v1/responses call against raw mlx_lm.stream_generate.

Same model, prompt, greedy sampling and length, measured in one run:
    python bench/overhead.py [--model PATH_OR_ID] [--tokens 64] [--runs 3]
Prints a table with the server/raw ratios and writes bench/out/overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

PROMPT = "Write a short story about a lighthouse keeper and a storm."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raw_run(model_path: str, tokens: int) -> dict[str, float]:
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(model_path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
    )
    sampler = make_sampler(temp=0.0)

    def once() -> dict[str, float]:
        start = time.perf_counter()
        first = last = start
        n = 0
        for resp in stream_generate(model, tokenizer, prompt, max_tokens=tokens, sampler=sampler):
            now = time.perf_counter()
            if n == 0:
                first = now
            last = now
            n = resp.generation_tokens
        return {"ttft_s": first - start, "tokens": n, "decode_tps": (n - 1) / (last - first)}

    once()  # warm-up
    return _median([once() for _ in range(ARGS.runs)])


def server_run(base_url: str, model_id: str, tokens: int) -> dict[str, float]:
    body = {
        "model": model_id,
        "input": PROMPT,
        "max_output_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }

    def once() -> dict[str, float]:
        start = time.perf_counter()
        first = last = 0.0
        n = 0
        with httpx.stream("POST", f"{base_url}/v1/responses", json=body, timeout=600) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "response.output_text.delta":
                    now = time.perf_counter()
                    first = first or now
                    last = now
                elif event["type"] in ("response.completed", "response.incomplete"):
                    n = event["response"]["usage"]["output_tokens"]
        return {"ttft_s": first - start, "tokens": n, "decode_tps": (n - 1) / (last - first)}

    once()
    return _median([once() for _ in range(ARGS.runs)])


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    from omni.cli import omni_home
    from omni.engine.model_source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "omni",
                "serve",
                "--model",
                source.path,
                "--port",
                str(port),
                "--db",
                str(Path(tmp) / "bench.db"),
                "--log-level",
                "warning",
            ],
            env={**os.environ},
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    httpx.get(f"{base_url}/health", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            model_id = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
            served = server_run(base_url, model_id, ARGS.tokens)
        finally:
            server.terminate()
            server.wait(timeout=60)
    raw = raw_run(source.path, ARGS.tokens)
    result = {
        "model": source.model_id,
        "max_tokens": ARGS.tokens,
        "runs": ARGS.runs,
        "raw_stream_generate": raw,
        "omni_responses_stream": served,
        "ratio_decode_tps": served["decode_tps"] / raw["decode_tps"],
        "ratio_ttft": served["ttft_s"] / raw["ttft_s"],
    }
    print(f"model {source.model_id}, {ARGS.tokens} tokens max, median of {ARGS.runs} runs")
    print(f"{'path':<28}{'tokens':>8}{'TTFT ms':>10}{'decode tok/s':>14}")
    for name, row in (("raw mlx_lm.stream_generate", raw), ("omni /v1/responses SSE", served)):
        ttft_ms = row["ttft_s"] * 1000
        print(f"{name:<28}{row['tokens']:>8.0f}{ttft_ms:>10.1f}{row['decode_tps']:>14.2f}")
    decode, ttft = result["ratio_decode_tps"], result["ratio_ttft"]
    print(f"ratio server/raw: decode {decode:.3f}, TTFT {ttft:.3f}")
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=None)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    ARGS = p.parse_args()
    main()
