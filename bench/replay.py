"""Replay and live-follow costs of the event log, and the raw mlx-lm baseline beside them.

    python bench/replay.py [--events 10000] [--live-tokens 2000] [--interval-ms 5.6]

1. Replay: a finished response of ~10,000 events (written by a SYNTHETIC engine, see
   _synthetic.py) is replayed with GET /v1/responses/{id}?stream=true: time to first byte and
   events/s, against how long raw mlx_lm.stream_generate takes to generate that many tokens.
2. Live follow: the synthetic engine emits one token every --interval-ms (5.6 ms is the
   135M model's per-token time on an H200); the latency from emit to the SSE client receiving
   the delta (recorder -> group commit -> notify -> follow -> SSE) is reported as p50/p99, and
   as a fraction of the raw per-token time.
Prints a table and writes bench/out/replay.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _synthetic import SyntheticEngine  # noqa: E402

from omni.api.app import Settings  # noqa: E402
from tests.server import ServerThread  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def replay_run(base: str, n_events: int) -> dict[str, float]:
    # One client throughout: a new httpx client spends tens of ms on its TLS context, which
    # time to first byte would count.
    with httpx.Client(base_url=base, timeout=600) as client:
        return _replay_runs(client, n_events)


def _replay_runs(client: httpx.Client, n_events: int) -> dict[str, float]:
    body = {"input": "x", "background": True, "max_output_tokens": n_events - 9}
    response_id = client.post("/v1/responses", json=body).json()["id"]
    while client.get(f"/v1/responses/{response_id}").json()["status"] == "queued":
        time.sleep(0.05)
    with client.stream("GET", f"/v1/responses/{response_id}?stream=true"):
        pass  # wait until it is finished (the stream ends at the terminal event)
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        first = 0.0
        frames = 0
        with client.stream("GET", f"/v1/responses/{response_id}?stream=true") as stream:
            for chunk in stream.iter_bytes():
                first = first or time.perf_counter()
                frames += chunk.count(b"\n\n")
        total = time.perf_counter() - start
        runs.append({"ttfb_ms": (first - start) * 1000, "events": frames, "seconds": total})
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "events_per_s": best["events"] / best["seconds"]}


def live_run(base: str, engine: SyntheticEngine, tokens: int) -> dict[str, float]:
    body = {"input": "x", "stream": True, "max_output_tokens": tokens}
    latencies = []
    with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=600) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: ") and '"response.output_text.delta"' in line:
                now = time.perf_counter()
                index = int(json.loads(line[6:])["delta"])
                latencies.append((now - engine.emitted_at[index]) * 1000)
    return {
        "deltas": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
    }


def raw_decode_tps(tokens: int = 32) -> tuple[str, float]:
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    from omni.cli.options import omni_home
    from omni.runtime.chat.worker import use_mlx_settings
    from omni.runtime.loading.source import resolve_model

    use_mlx_settings()  # as Omni's engine runs
    source = resolve_model(None, omni_home(), lambda m: print(m, file=sys.stderr))
    model, tokenizer = load(source.path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a story."}], add_generation_prompt=True
    )
    last = None
    for resp in stream_generate(
        model, tokenizer, prompt, max_tokens=tokens, sampler=make_sampler(temp=0.0)
    ):
        last = resp
    assert last is not None
    return source.model_id, last.generation_tps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--live-tokens", type=int, default=2000)
    p.add_argument("--interval-ms", type=float, default=5.6)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        engine = SyntheticEngine()
        server = ServerThread(Settings(db_path=f"{tmp}/bench.db"), engine).start()
        try:
            replay = replay_run(server.base_url, args.events)
            engine.interval_s = args.interval_ms / 1000
            live = live_run(server.base_url, engine, args.live_tokens)
        finally:
            server.stop()
    model_id, raw_tps = raw_decode_tps()
    raw_ms_per_token = 1000 / raw_tps
    result = {
        "replay": replay,
        "live_follow": {**live, "interval_ms": args.interval_ms},
        "raw_mlx_lm": {"model": model_id, "decode_tps": raw_tps},
        "ratio_replay_vs_raw_generation": replay["events_per_s"] / raw_tps,
        "ratio_live_p50_vs_raw_token_time": live["p50_ms"] / raw_ms_per_token,
    }
    print(f"replay of a finished {replay['events']}-event response:")
    print(
        f"  time to first byte {replay['ttfb_ms']:.1f} ms, {replay['events_per_s']:,.0f} events/s"
    )
    print(
        f"  raw mlx-lm ({model_id}) generates {raw_tps:.1f} tokens/s here: replay is "
        f"{result['ratio_replay_vs_raw_generation']:,.0f}x faster than regenerating"
    )
    print(f"live follower, one delta every {args.interval_ms} ms ({live['deltas']} deltas):")
    print(
        f"  emit -> client latency p50 {live['p50_ms']:.2f} ms, p99 {live['p99_ms']:.2f} ms, "
        f"max {live['max_ms']:.2f} ms"
    )
    print(
        f"  p50 is {result['ratio_live_p50_vs_raw_token_time']:.4f} of raw mlx-lm's "
        f"{raw_ms_per_token:.1f} ms per token"
    )
    write_results("replay", result)


if __name__ == "__main__":
    main()
