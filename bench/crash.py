"""kill -9 trials: how many events a crash loses, and whether background work carries on.

    python bench/crash.py [--trials 10] [--synchronous NORMAL|FULL]

Each trial starts `omni serve` (a tiny random-weight llama), creates a greedy background
response, follows it live, SIGKILLs the server after a random number of deltas, restarts it on
the same database, and checks: the database passes PRAGMA integrity_check; every event the
follower received before the kill is in the log byte for byte (lost = those that are not);
sequence numbers are contiguous across the crash; the response reaches a terminal state; and
its text equals an uninterrupted greedy generation of the same request (token-exact
continuation). Writes bench/out/crash.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402

from omni.testing.llama import build_tiny_llama  # noqa: E402
from tests.test_cli import serving  # noqa: E402
from tests.test_crash import frames, seq_of  # noqa: E402

TOKENS = 1500


def trial(model: Path, db: Path, kill_after: int) -> dict[str, object]:
    body = {
        "input": "Tell me a long story.",
        "background": True,
        "temperature": 0,
        "max_output_tokens": TOKENS,
    }
    with serving(model, db) as (base, proc):
        response_id = httpx.post(f"{base}/v1/responses", json=body).json()["id"]
        buffer = b""
        with httpx.stream("GET", f"{base}/v1/responses/{response_id}?stream=true") as stream:
            for chunk in stream.iter_bytes():
                buffer += chunk
                if buffer.count(b"event: response.output_text.delta") >= kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
    seen = frames(buffer.rsplit(b"\n\n", 1)[0] + b"\n\n")
    with sqlite3.connect(db) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    restart = time.perf_counter()
    with serving(model, db) as (base, _):
        replay = frames(
            httpx.get(f"{base}/v1/responses/{response_id}?stream=true", timeout=300).content
        )
        recovered_s = time.perf_counter() - restart
        final = httpx.get(f"{base}/v1/responses/{response_id}").json()
    lost = sum(1 for i, frame in enumerate(seen) if i >= len(replay) or replay[i] != frame)
    return {
        "kill_after_deltas": kill_after,
        "seen_before_kill": len(seen),
        "lost": lost,
        "integrity": integrity,
        "contiguous": [seq_of(f) for f in replay] == list(range(len(replay))),
        "status": final["status"],
        "text": final["output"][0]["content"][0]["text"] if final["output"] else "",
        "restart_to_end_s": recovered_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llama(Path(tmp) / "tiny-llama")
        # The uninterrupted reference (also the raw baseline time for the same work).
        with serving(model, Path(tmp) / "ref.db") as (base, _):
            start = time.perf_counter()
            body = {"input": "Tell me a long story.", "temperature": 0, "max_output_tokens": TOKENS}
            reference = httpx.post(f"{base}/v1/responses", json=body, timeout=300).json()
            uninterrupted_s = time.perf_counter() - start
        ref_text = reference["output"][0]["content"][0]["text"]
        results = []
        for i in range(args.trials):
            result = trial(model, Path(tmp) / f"trial{i}.db", rng.randint(5, 300))
            result["exact"] = result.pop("text") == ref_text
            results.append(result)
            print(json.dumps(result))
    total_lost = sum(int(r["lost"]) for r in results)
    print(
        f"{len(results)} kill -9 trials: {total_lost} events lost of "
        f"{sum(int(r['seen_before_kill']) for r in results)} seen before the kills; "
        f"integrity ok in {sum(r['integrity'] == 'ok' for r in results)}; contiguous in "
        f"{sum(bool(r['contiguous']) for r in results)}; token-exact continuation in "
        f"{sum(bool(r['exact']) for r in results)}"
    )
    write_results(
        "crash",
        {"trials": results, "events_lost": total_lost, "uninterrupted_s": uninterrupted_s},
    )


if __name__ == "__main__":
    main()
