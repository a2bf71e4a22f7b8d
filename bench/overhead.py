"""Single-stream overhead: streamed Responses and chat against raw mlx_lm.stream_generate.

Streamed /v1/responses and streamed /v1/chat/completions against raw mlx_lm.stream_generate.

Same model, prompt, greedy sampling and length, measured in one run:
    python bench/overhead.py [--model PATH_OR_ID] [--tokens 64] [--runs 3] [--prefix-cache]
`omni serve` runs as a subprocess on a temp db and raw mlx-lm in a process of its own, both
loaded at once; the runs are interleaved (a round is one run of each path, in turn order), so a
machine whose speed drifts (a GPU's host, a busy CPU) weighs on every path alike. The ratios are
the medians of each round's own ratio.
The server's prefix (KV) cache is off by default (`--prompt-cache-entries 0`): every run sends
the same prompt, and a cached prefix would make the server's time to first token a cache hit
while raw mlx-lm starts cold each time. Chat requests carry `Cache-Control: no-cache` so the
replay cache does not answer them. Decode tok/s is (tokens - 1) / (last delta - first delta).
Prints a table with the server/raw ratios of decode tok/s and the TTFT differences in ms, and
writes bench/out/overhead.json and bench/out/overhead.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import RawWorker, chat_body, chat_ids, engine_form, start_omni  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper and a storm."
NO_CACHE = {"Cache-Control": "no-cache"}
Run = Callable[[], dict[str, float]]  # one timed run of a path


def raw_worker(conn: Connection, model_path: str, tokens: int) -> None:
    """Raw mlx-lm in its own process: one timed run per request on `conn`, None to stop."""
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(model_path)
    model = engine_form(model)  # the weights and kernels Omni's engine runs
    prompt = chat_ids(tokenizer, [{"role": "user", "content": PROMPT}])
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
        return {
            "ttft_s": first - start,
            "tokens": n,
            "decode_tps": decode_tps(n, first, last),
            "cached_tokens": 0,
        }

    while conn.recv() is not None:
        conn.send(once())


def responses_run(client: httpx.Client, model_id: str, tokens: int) -> Run:
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
        n = cached = 0
        with client.stream("POST", "/v1/responses", json=body) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "response.output_text.delta":
                    now = time.perf_counter()
                    first = first or now
                    last = now
                elif event["type"] in ("response.completed", "response.incomplete"):
                    use = event["response"]["usage"]
                    n = use["output_tokens"]
                    cached = use["input_tokens_details"]["cached_tokens"]
        return {
            "ttft_s": first - start,
            "tokens": n,
            "decode_tps": decode_tps(n, first, last),
            "cached_tokens": cached,
        }

    return once


def chat_run(client: httpx.Client, model_id: str, tokens: int) -> Run:
    body = chat_body(model_id, PROMPT, tokens)

    def once() -> dict[str, float]:
        start = time.perf_counter()
        first = last = 0.0
        n = cached = 0
        with client.stream("POST", "/v1/chat/completions", json=body, headers=NO_CACHE) as resp:
            resp.raise_for_status()
            if resp.headers.get("x-omni-cache") == "hit":
                raise SystemExit("a chat completion was answered from the replay cache")
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if any(c["delta"].get("content") for c in chunk["choices"]):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                if chunk.get("usage"):
                    n = chunk["usage"]["completion_tokens"]
                    details = chunk["usage"].get("prompt_tokens_details") or {}
                    cached = details.get("cached_tokens", 0)
        return {
            "ttft_s": first - start,
            "tokens": n,
            "decode_tps": decode_tps(n, first, last),
            "cached_tokens": cached,
        }

    return once


def engine_run(source: Any, tokens: int) -> tuple[Run, Callable[[], None]]:
    """Omni's engine alone, driven in this process as the server drives it (a job, its
    outputs on an event loop), without HTTP, the log or SSE: where the time goes between
    raw mlx-lm and the server's paths."""
    import asyncio

    from omni.ports.jobs import Delta, Failed, Finished, Job, Sampling
    from omni.runtime.chat.engine import MLXEngine

    engine = MLXEngine(source, prompt_cache_entries=0)
    engine.start()
    prompt = engine.render([{"role": "user", "content": PROMPT}], [])

    async def go() -> dict[str, float]:
        job = Job(prompt, Sampling(temperature=0, max_tokens=tokens))
        start = time.perf_counter()
        first = last = 0.0
        engine.submit(job)
        while True:
            out = await job.outputs.get()
            if isinstance(out, Delta) and out.text:
                last = time.perf_counter()
                first = first or last
            elif isinstance(out, Finished):
                n = out.completion_tokens
                break
            elif isinstance(out, Failed):
                raise SystemExit(f"the engine failed: {out.message}")
        return {"ttft_s": first - start, "tokens": n, "decode_tps": decode_tps(n, first, last),
                "cached_tokens": 0}  # fmt: skip

    return lambda: asyncio.run(go()), engine.close


def decode_tps(n: int, first: float, last: float) -> float:
    return (n - 1) / (last - first) if n > 1 and last > first else float("nan")


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    paths: tuple[str, ...] = ("raw", "responses", "chat") + (("engine",) if ARGS.engine else ())
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    raw = RawWorker(raw_worker, source.path, ARGS.tokens, like_engine=True)
    with tempfile.TemporaryDirectory() as tmp:
        flags = () if ARGS.prefix_cache else ("--prompt-cache-entries", "0")
        server, base_url = start_omni(source.path, Path(tmp) / "bench.db", *flags)
        # One client for every request, as an SDK keeps one: a new httpx client per request
        # spends tens of ms building its TLS context, which is the client's cost, not the server's.
        client = httpx.Client(base_url=base_url, timeout=600)
        close_engine: Callable[[], None] | None = None
        try:
            model_id = client.get("/v1/models").json()["data"][0]["id"]
            once = {
                "raw": lambda: cast(dict[str, float], raw.ask(True)),
                "responses": responses_run(client, model_id, ARGS.tokens),
                "chat": chat_run(client, model_id, ARGS.tokens),
            }
            if ARGS.engine:
                once["engine"], close_engine = engine_run(source, ARGS.tokens)
            for path in paths:
                once[path]()  # warm-up
            for i in range(ARGS.runs):  # rounds, each path once, the order turning
                for path in paths[i % len(paths) :] + paths[: i % len(paths)]:
                    runs[path].append(once[path]())
        finally:
            client.close()
            if close_engine is not None:
                close_engine()
            raw.stop()
            server.terminate()
            server.wait(timeout=60)
    raw, responses, chat = (_median(runs[p]) for p in paths[:3])

    def ratios(path: str) -> dict[str, float]:
        pairs = list(zip(runs[path], runs["raw"], strict=True))
        return {
            "decode_tps": statistics.median(o["decode_tps"] / r["decode_tps"] for o, r in pairs),
            "ttft": statistics.median(o["ttft_s"] / r["ttft_s"] for o, r in pairs),
            "ttft_diff_ms": statistics.median((o["ttft_s"] - r["ttft_s"]) * 1000 for o, r in pairs),
        }

    result = {
        "model": source.model_id,
        "max_tokens": ARGS.tokens,
        "runs": ARGS.runs,
        "server_prefix_cache": ARGS.prefix_cache,
        "raw_stream_generate": raw,
        "omni_responses_stream": responses,
        "omni_chat_stream": chat,
        "ratio_responses_over_raw": ratios("responses"),
        "ratio_chat_over_raw": ratios("chat"),
        **(
            {
                "omni_engine_alone": _median(runs["engine"]),
                "ratio_engine_over_raw": ratios("engine"),
            }
            if ARGS.engine
            else {}
        ),  # fmt: skip
        "rounds": runs,
    }
    prefix = "on" if ARGS.prefix_cache else "off"
    print(
        f"model {source.model_id}, {ARGS.tokens} tokens max, greedy, {ARGS.runs} interleaved "
        f"rounds (medians; ratios: median of each round's), server prefix cache {prefix}"
    )
    print(
        f"{'path':<30}{'tokens':>7}{'cached':>7}{'TTFT ms':>9}{'decode tok/s':>14}"
        f"{'decode/raw':>12}{'TTFT-raw ms':>13}"
    )
    rows: tuple[tuple[str, Any, Any], ...] = (
        ("raw mlx_lm.stream_generate", raw, None),
        ("omni /v1/responses SSE", responses, result["ratio_responses_over_raw"]),
        ("omni /v1/chat/completions SSE", chat, result["ratio_chat_over_raw"]),
    )
    if ARGS.engine:
        rows += (("omni engine alone (no HTTP)", result["omni_engine_alone"],
                  result["ratio_engine_over_raw"]),)  # fmt: skip
    for name, row, ratio in rows:
        ttft_ms = row["ttft_s"] * 1000
        tail = f"{ratio['decode_tps']:>12.3f}{ratio['ttft_diff_ms']:>+13.1f}" if ratio else ""
        print(
            f"{name:<30}{row['tokens']:>7.0f}{row['cached_tokens']:>7.0f}{ttft_ms:>9.1f}"
            f"{row['decode_tps']:>14.2f}{tail}"
        )
    labels = ("raw mlx-lm", "omni responses", "omni chat")
    data = (raw, responses, chat)
    write_results(
        "overhead",
        result,
        [
            Bars(
                "decode tokens/s (higher is better)",
                "tokens/s",
                {k: r["decode_tps"] for k, r in zip(labels, data, strict=True)},
            ),
            Bars(
                "time to first token (lower is better)",
                "ms",
                {k: r["ttft_s"] * 1000 for k, r in zip(labels, data, strict=True)},
            ),
        ],
        f"single-stream overhead: {source.model_id}, {ARGS.tokens} tokens, greedy",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument("--tokens", type=int, default=64, help="max tokens of every path")
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measured rounds, one run of each path (after a warm-up)",
    )
    p.add_argument(
        "--prefix-cache",
        action="store_true",
        help="keep the server's prefix (KV) cache on (default: off, like raw mlx-lm)",
    )
    p.add_argument(
        "--engine",
        action="store_true",
        help="also time Omni's engine alone, in this process, without HTTP, the log or SSE",
    )
    ARGS = p.parse_args()
    main()
