"""Replay cache: a fresh chat completion against the same request answered from the log.

One deterministic request (temperature 0, stored) is sent to `omni serve` (a subprocess on
a temp db) with `Cache-Control: no-cache` (a fresh generation) and without it (a cache hit),
non-streamed (total time) and streamed (time to the first content byte, and total), then raw
mlx_lm.stream_generate runs the same prompt and length in-process after the server stopped:
    python bench/cache.py [--model PATH_OR_ID] [--tokens 32] [--fresh-runs 5] [--hit-runs 50]
Every hit must carry `x-omni-cache: hit` and the fresh answer's content. Prints p50/p99 per
path, the ratios hit/fresh and fresh/raw, and writes bench/out/cache.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import chat_ids, start_omni  # noqa: E402

PROMPT = "Name three facts about the Moon."
NO_CACHE = {"Cache-Control": "no-cache"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {"n": len(ms), "p50_ms": statistics.median(ms), "p99_ms": percentile(ms, 0.99)}


# --- server -------------------------------------------------------------------------


class Checks:
    """What every answer must be: fresh ones a miss, hits a hit, all the same content."""

    def __init__(self, reference: str):
        self.reference = reference
        self.ids: set[str] = set()
        self.failures: list[str] = []
        self.hits_ok = 0
        self.fresh_same = 0

    def check(self, label: str, hit: bool, header: str | None, cid: str, content: str) -> None:
        want = "hit" if hit else "miss"
        if header != want:
            self.failures.append(f"{label}: x-omni-cache {header!r}, expected {want!r}")
        if cid in self.ids:
            self.failures.append(f"{label}: id {cid} was already answered")
        self.ids.add(cid)
        same = content == self.reference
        if not same:
            self.failures.append(f"{label}: content differs from the fresh answer: {content!r}")
        if hit and header == "hit" and same:
            self.hits_ok += 1
        if not hit and same:
            self.fresh_same += 1


def plain(client: httpx.Client, body: dict[str, Any], fresh: bool) -> tuple[float, Any, dict]:
    start = time.perf_counter()
    resp = client.post("/v1/chat/completions", json=body, headers=NO_CACHE if fresh else None)
    total = time.perf_counter() - start
    resp.raise_for_status()
    return total, resp.headers.get("x-omni-cache"), resp.json()


def streamed(
    client: httpx.Client, body: dict[str, Any], fresh: bool
) -> tuple[float, float, str | None, str, str]:
    start = time.perf_counter()
    first = 0.0
    cid = ""
    parts: list[str] = []
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={**body, "stream": True},
        headers=NO_CACHE if fresh else None,
    ) as resp:
        resp.raise_for_status()
        header = resp.headers.get("x-omni-cache")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            cid = chunk["id"]
            for choice in chunk["choices"]:
                text = choice["delta"].get("content")
                if text:
                    first = first or time.perf_counter()
                    parts.append(text)
    total = time.perf_counter() - start
    return first - start, total, header, cid, "".join(parts)


def server_run(base_url: str, model_id: str) -> dict[str, Any]:
    body = {
        "model": model_id,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": ARGS.tokens,
        "temperature": 0,
        "store": True,  # only a stored completion is answered from the log again
    }
    with httpx.Client(base_url=base_url, timeout=600) as client:
        # Warm-up: a fresh generation that also puts the answer in the cache.
        _, header, first = plain(client, body, fresh=True)
        checks = Checks(first["choices"][0]["message"]["content"])
        checks.check("warm-up", False, header, first["id"], checks.reference)
        tokens = first["usage"]["completion_tokens"]

        fresh_plain, fresh_ttfb, fresh_stream = [], [], []
        for i in range(ARGS.fresh_runs):
            total, header, data = plain(client, body, fresh=True)
            content = data["choices"][0]["message"]["content"]
            checks.check(f"fresh plain #{i}", False, header, data["id"], content)
            fresh_plain.append(total)
        for i in range(ARGS.fresh_runs):
            ttfb, total, header, cid, content = streamed(client, body, fresh=True)
            checks.check(f"fresh stream #{i}", False, header, cid, content)
            fresh_ttfb.append(ttfb)
            fresh_stream.append(total)

        hit_plain, hit_ttfb, hit_stream = [], [], []
        for i in range(ARGS.hit_runs):
            total, header, data = plain(client, body, fresh=False)
            content = data["choices"][0]["message"]["content"]
            checks.check(f"hit plain #{i}", True, header, data["id"], content)
            hit_plain.append(total)
        for i in range(ARGS.hit_runs):
            ttfb, total, header, cid, content = streamed(client, body, fresh=False)
            checks.check(f"hit stream #{i}", True, header, cid, content)
            hit_ttfb.append(ttfb)
            hit_stream.append(total)

    return {
        "completion_tokens": tokens,
        "answer": checks.reference,
        "fresh": {
            "plain_total": summary(fresh_plain),
            "stream_first_content": summary(fresh_ttfb),
            "stream_total": summary(fresh_stream),
        },
        "hit": {
            "plain_total": summary(hit_plain),
            "stream_first_content": summary(hit_ttfb),
            "stream_total": summary(hit_stream),
        },
        "verified": {
            "hits": 2 * ARGS.hit_runs,
            "hits_with_header_and_same_content": checks.hits_ok,
            "fresh": 2 * ARGS.fresh_runs + 1,
            "fresh_with_same_content": checks.fresh_same,
            "distinct_ids": len(checks.ids),
            "failures": checks.failures,
        },
    }


# --- raw mlx-lm ---------------------------------------------------------------------


def raw_run(model_path: str, tokens: int) -> dict[str, Any]:
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(model_path)
    prompt = chat_ids(tokenizer, [{"role": "user", "content": PROMPT}])
    sampler = make_sampler(temp=0.0)

    def once() -> tuple[float, float, int, str]:
        start = time.perf_counter()
        first = 0.0
        n = 0
        text = []
        for resp in stream_generate(model, tokenizer, prompt, max_tokens=tokens, sampler=sampler):
            first = first or time.perf_counter()
            n = resp.generation_tokens
            text.append(resp.text)
        return first - start, time.perf_counter() - start, n, "".join(text)

    once()  # warm-up
    runs = [once() for _ in range(ARGS.fresh_runs)]
    return {
        "tokens": runs[-1][2],
        "answer": runs[-1][3],
        "first_token": summary([r[0] for r in runs]),
        "total": summary([r[1] for r in runs]),
    }


# --- report -------------------------------------------------------------------------


def main() -> None:
    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory() as tmp:
        server, base_url = start_omni(source.path, Path(tmp) / "bench.db")
        try:
            model_id = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
            served = server_run(base_url, model_id)
        finally:
            server.terminate()
            server.wait(timeout=60)
    raw = raw_run(source.path, ARGS.tokens)

    fresh, hit = served["fresh"], served["hit"]

    def ratio(a: dict[str, float], b: dict[str, float]) -> float:
        return a["p50_ms"] / b["p50_ms"]

    ratios = {
        "hit_over_fresh_plain_total": ratio(hit["plain_total"], fresh["plain_total"]),
        "hit_over_fresh_stream_first_content": ratio(
            hit["stream_first_content"], fresh["stream_first_content"]
        ),
        "hit_over_fresh_stream_total": ratio(hit["stream_total"], fresh["stream_total"]),
        "fresh_plain_total_over_raw_total": ratio(fresh["plain_total"], raw["total"]),
        "fresh_stream_total_over_raw_total": ratio(fresh["stream_total"], raw["total"]),
        "fresh_first_content_over_raw_first_token": ratio(
            fresh["stream_first_content"], raw["first_token"]
        ),
    }
    result = {
        "model": source.model_id,
        "prompt": PROMPT,
        "max_tokens": ARGS.tokens,
        "server": served,
        "raw_stream_generate": raw,
        "ratios_p50": ratios,
    }

    print(
        f"model {source.model_id}, temperature 0, {ARGS.tokens} max tokens "
        f"({served['completion_tokens']} generated by omni, {raw['tokens']} by raw mlx-lm)"
    )
    print(f"{'path':<40}{'n':>5}{'p50 ms':>11}{'p99 ms':>11}")
    rows = (
        ("fresh (no-cache), non-streamed total", fresh["plain_total"]),
        ("fresh (no-cache), streamed 1st content", fresh["stream_first_content"]),
        ("fresh (no-cache), streamed total", fresh["stream_total"]),
        ("cache hit, non-streamed total", hit["plain_total"]),
        ("cache hit, streamed 1st content", hit["stream_first_content"]),
        ("cache hit, streamed total", hit["stream_total"]),
        ("raw mlx_lm.stream_generate 1st token", raw["first_token"]),
        ("raw mlx_lm.stream_generate total", raw["total"]),
    )
    for name, row in rows:
        print(f"{name:<40}{row['n']:>5}{row['p50_ms']:>11.1f}{row['p99_ms']:>11.1f}")
    print(
        "p50 ratio hit/fresh: non-streamed {:.4f}, streamed 1st content {:.4f}, "
        "streamed total {:.4f}".format(
            ratios["hit_over_fresh_plain_total"],
            ratios["hit_over_fresh_stream_first_content"],
            ratios["hit_over_fresh_stream_total"],
        )
    )
    print(
        "p50 ratio fresh/raw: non-streamed total {:.3f}, streamed total {:.3f}, "
        "1st content/1st token {:.3f}".format(
            ratios["fresh_plain_total_over_raw_total"],
            ratios["fresh_stream_total_over_raw_total"],
            ratios["fresh_first_content_over_raw_first_token"],
        )
    )
    v = served["verified"]
    print(
        f"verified: {v['hits_with_header_and_same_content']}/{v['hits']} hits had "
        f"x-omni-cache: hit and the fresh answer's content; "
        f"{v['fresh_with_same_content']}/{v['fresh']} fresh answers identical; "
        f"{v['distinct_ids']} distinct ids; raw mlx-lm text "
        f"{'identical' if raw['answer'] == served['answer'] else 'DIFFERENT'}"
    )
    write_results("cache", result)
    if v["failures"]:
        print("FAILED:\n  " + "\n  ".join(v["failures"][:20]), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument("--tokens", type=int, default=32, help="max_tokens of the request")
    p.add_argument("--fresh-runs", type=int, default=5, help="fresh generations per mode")
    p.add_argument("--hit-runs", type=int, default=50, help="cache hits per mode")
    ARGS = p.parse_args()
    main()
