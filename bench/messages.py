"""A Messages stream's decode rate against a chat completion stream's, through one server.

Streamed POST /v1/messages (Anthropic's events) against streamed /v1/chat/completions, the
baseline measured in the same run:
    python bench/messages.py [--model PATH_OR_ID] [--tokens 128] [--rounds 9]
A message runs as its chat completion would (the same planner, engine and batch); only its
recorder, its events in the log and its SSE differ, and this measures what they cost. One
`omni serve` (the tiny random-weight llama unless --model) on a temp db; the same prompt,
greedy, the same output length on both paths; the rounds are interleaved (each round one
request of each, the order turning), so a machine whose speed drifts weighs on both alike,
and the ratio is the median of each round's own ratio. The prefix (KV) cache is off
(`--prompt-cache-entries 0`) and every request carries `Cache-Control: no-cache`, so neither
path is answered from a cache. Decode tok/s is (tokens - 1) / (last delta - first delta).
A busy machine moves the rates from one request to the next; the CPU seconds the server's
process (its event loop, the recorders, the log's writer, SSE) and its engine's spent on each
path, summed over the rounds, say what each path costs whatever else runs (Linux /proc).
Prints a table and writes bench/out/messages.json and bench/out/messages.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import chat_body, cpu_seconds, model_or_tiny, start_omni  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper and a storm."
NO_CACHE = {"Cache-Control": "no-cache"}
Run = Callable[[], dict[str, float]]  # one timed request of a path


def chat_run(client: httpx.Client, model: str, tokens: int) -> Run:
    body = chat_body(model, PROMPT, tokens)

    def once() -> dict[str, float]:
        start = time.perf_counter()
        first = last = 0.0
        n = 0
        with client.stream("POST", "/v1/chat/completions", json=body, headers=NO_CACHE) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if any(c["delta"].get("content") for c in chunk["choices"]):
                    last = time.perf_counter()
                    first = first or last
                if chunk.get("usage"):
                    n = chunk["usage"]["completion_tokens"]
        return timed(start, first, last, n)

    return once


def messages_run(client: httpx.Client, model: str, tokens: int) -> Run:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }

    def once() -> dict[str, float]:
        start = time.perf_counter()
        first = last = 0.0
        n = 0
        with client.stream("POST", "/v1/messages", json=body, headers=NO_CACHE) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "content_block_delta" and event["delta"].get("text"):
                    last = time.perf_counter()
                    first = first or last
                elif event["type"] == "message_delta":
                    n = event["usage"]["output_tokens"]
                elif event["type"] == "error":
                    raise SystemExit(f"the message failed: {event['error']['message']}")
        return timed(start, first, last, n)

    return once


def timed(start: float, first: float, last: float, n: int) -> dict[str, float]:
    decode = (n - 1) / (last - first) if n > 1 and last > first else float("nan")
    return {"ttft_s": first - start, "tokens": n, "decode_tps": decode}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def measure(base_url: str, model: str, pid: int) -> dict[str, list[dict[str, float]]]:
    """Each path once to warm up, then ARGS.rounds rounds of one request each, interleaved;
    each run with the CPU seconds the server (`pid`) and its engine spent meanwhile."""
    paths = ("chat", "messages")
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    with httpx.Client(base_url=base_url, timeout=600) as client:
        once = {
            "chat": chat_run(client, model, ARGS.tokens),
            "messages": messages_run(client, model, ARGS.tokens),
        }
        for path in paths:
            once[path]()
        for i in range(ARGS.rounds):
            for path in paths[i % 2 :] + paths[: i % 2]:
                server, engine, _ = cpu_seconds(pid)
                run = once[path]()
                server_now, engine_now, _ = cpu_seconds(pid)
                run |= {"server_cpu_s": server_now - server, "engine_cpu_s": engine_now - engine}
                runs[path].append(run)
    return runs


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, label = model_or_tiny(ARGS.model, Path(tmp))
        server, base_url = start_omni(path, Path(tmp) / "bench.db", "--prompt-cache-entries", "0")
        try:
            model = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
            runs = measure(base_url, model, server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)
    pairs = list(zip(runs["messages"], runs["chat"], strict=True))
    per_round = [m["decode_tps"] / c["decode_tps"] for m, c in pairs]
    chat, messages = _median(runs["chat"]), _median(runs["messages"])

    def cpu(where: str) -> float:  # the rounds' sums: one run is a few 10 ms ticks
        return sum(r[where] for r in runs["messages"]) / sum(r[where] for r in runs["chat"])

    result = {
        "model": label,
        "max_tokens": ARGS.tokens,
        "rounds": ARGS.rounds,
        "chat_stream": chat,
        "messages_stream": messages,
        "ratio_messages_over_chat": {
            "decode_tps": statistics.median(per_round),
            "decode_tps_quartiles": statistics.quantiles(per_round, n=4),
            "ttft_diff_ms": statistics.median((m["ttft_s"] - c["ttft_s"]) * 1000 for m, c in pairs),
            "server_cpu": cpu("server_cpu_s"),
            "engine_cpu": cpu("engine_cpu_s"),
        },
        "runs": runs,
    }
    ratio = result["ratio_messages_over_chat"]
    print(
        f"model {label}, {ARGS.tokens} tokens max, greedy, {ARGS.rounds} interleaved rounds "
        "(medians; the ratio: median of each round's), prefix cache off"
    )
    print(f"{'path':<26}{'tokens':>7}{'TTFT ms':>9}{'decode tok/s':>14}{'server CPU ms':>15}")
    for name, row in (("/v1/chat/completions SSE", chat), ("/v1/messages SSE", messages)):
        print(
            f"{name:<26}{row['tokens']:>7.0f}{row['ttft_s'] * 1000:>9.1f}"
            f"{row['decode_tps']:>14.2f}{row['server_cpu_s'] * 1000:>15.0f}"
        )
    low, _, high = ratio["decode_tps_quartiles"]
    print(
        f"messages/chat: decode {ratio['decode_tps']:.3f}x (quartiles of the rounds {low:.3f}, "
        f"{high:.3f}), TTFT {ratio['ttft_diff_ms']:+.1f} ms; CPU over all rounds: server "
        f"{ratio['server_cpu']:.3f}x, engine {ratio['engine_cpu']:.3f}x"
    )
    write_results(
        "messages",
        result,
        [
            Bars(
                "decode tokens/s (higher is better)",
                "tokens/s",
                {"chat": chat["decode_tps"], "messages": messages["decode_tps"]},
            ),
            Bars(
                "time to first token (lower is better)",
                "ms",
                {"chat": chat["ttft_s"] * 1000, "messages": messages["ttft_s"] * 1000},
            ),
        ],
        f"Messages against chat streams: {label}, {ARGS.tokens} tokens, greedy",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: tiny llama)")
    p.add_argument("--tokens", type=int, default=128, help="max tokens of every request")
    p.add_argument("--rounds", type=int, default=9, help="measured rounds (after a warm-up)")
    ARGS = p.parse_args()
    main()
