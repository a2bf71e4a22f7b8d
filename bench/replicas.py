"""Replicas on PostgreSQL: the event pipeline on PostgreSQL against SQLite, and what a follower
on another replica pays against a follower on the replica that generates.

    python bench/replicas.py [--levels 1,16,64] [--tokens 1000] [--follow-tokens 2000]

Needs a PostgreSQL server (OMNI_TEST_POSTGRES names its administrator's URL; default the
loopback server, user postgres): the bench makes a database of its own and drops it after.

1. Pipeline, as bench/pipeline.py, with the SYNTHETIC engine (bench/_synthetic.py: no model):
   at each level N, N clients stream POST /v1/responses at once through a real Hypercorn
   server; delta events/s received, each checked against the delta rows in the log. The
   same levels on an SQLite file and on a PostgreSQL database, in one run.
2. Followers: two servers (replicas `a` and `b`) on one PostgreSQL log. A background
   response generates on `a`, one delta every --interval-ms; one client follows it through
   `a`, another through `b` (whose wake-ups come through LISTEN/NOTIFY), at once. Latency is
   from the engine's emit to the client's receipt of each delta, p50 and p99 for each, and
   the other replica's extra latency; and each delta's receipt through `b` after `a`.
   Each replica is a process of its own, as replicas are.
Prints a table and writes bench/out/replicas.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _synthetic import SyntheticEngine  # noqa: E402
from pipeline import DELTA, run_level  # noqa: E402
from replay import percentile  # noqa: E402

from omni.api.app import Settings  # noqa: E402
from omni.db import upgrade  # noqa: E402
from tests.postgres import database, rows  # noqa: E402
from tests.server import ServerThread  # noqa: E402

SKIPPED = 50  # a follower's first deltas may be read back from the log, not followed live


def sqlite_deltas(db_path: str) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        query = "SELECT count(*) FROM events WHERE type = ?"
        return int(conn.execute(query, (DELTA,)).fetchone()[0])


def postgres_deltas(url: str) -> int:
    return int(rows(url, "SELECT count(*) FROM events WHERE type = %s", DELTA)[0][0])


def pipeline(
    name: str, db: str, count: Callable[[], int], clients: ProcessPoolExecutor
) -> list[dict[str, Any]]:
    levels: list[int] = ARGS.levels
    settings = Settings(db_path=db, max_queued=max(256, 2 * max(levels)))
    server = ServerThread(settings, SyntheticEngine()).start()
    found = []
    try:
        clients.submit(run_level, server.base_url, 1, 16).result()  # warm-up
        for n in levels:
            before = count()
            counts, wall = clients.submit(run_level, server.base_url, n, ARGS.tokens).result()
            received, persisted = sum(counts), count() - before
            found.append(
                {
                    "backend": name,
                    "clients": n,
                    "deltas_received": received,
                    "deltas_persisted": persisted,
                    "expected": n * ARGS.tokens,
                    "wall_s": wall,
                    "events_per_s": received / wall,
                }
            )
            print(f"  {name} N={n}: {received / wall:,.0f} delta events/s", file=sys.stderr)
    finally:
        server.stop()
    return found


def replica(url: str, name: str, interval_s: float, conn: Any) -> None:
    """A server of its own process (replicas are processes: none shares another's GIL) on
    `url`; sends its base URL, then, told to stop, when its engine emitted each delta."""
    engine = SyntheticEngine(interval_s=interval_s)
    server = ServerThread(Settings(db_path=url, replica=name), engine).start()
    conn.send(server.base_url)
    conn.recv()
    server.stop()
    conn.send(engine.emitted_at)


def follow(base: str, response_id: str, into: dict[int, float]) -> None:
    """When each delta of the response reached this client (perf_counter: one clock for every
    process of this machine)."""
    url = f"{base}/v1/responses/{response_id}?stream=true"
    with httpx.stream("GET", url, timeout=600) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: ") and f'"{DELTA}"' in line:
                now = time.perf_counter()
                into[int(json.loads(line[6:])["delta"])] = now


def latencies(received: dict[int, float], since: dict[int, float]) -> dict[str, float]:
    gaps = [(at - since[i]) * 1000 for i, at in received.items() if i >= SKIPPED]
    return {
        "deltas": len(gaps),
        "p50_ms": statistics.median(gaps),
        "p99_ms": percentile(gaps, 0.99),
        "max_ms": max(gaps),
    }


def followers(url: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for name, interval in (("a", ARGS.interval_ms / 1000), ("b", 0.0)):
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=replica, args=(url, name, interval, theirs), daemon=True)
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    a_url, b_url = (pipe.recv() for pipe in pipes)
    try:
        body = {"input": "x", "background": True, "max_output_tokens": ARGS.follow_tokens}
        response_id = httpx.post(f"{a_url}/v1/responses", json=body, timeout=60).json()["id"]
        here: dict[int, float] = {}
        there: dict[int, float] = {}
        readers = [
            threading.Thread(target=follow, args=(a_url, response_id, here)),
            threading.Thread(target=follow, args=(b_url, response_id, there)),
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
    finally:
        for pipe in pipes:
            pipe.send("stop")
        emitted, _ = (pipe.recv() for pipe in pipes)
        for proc in procs:
            proc.join(30)
    if len(here) != ARGS.follow_tokens or len(there) != ARGS.follow_tokens:
        raise SystemExit(f"followers saw {len(here)} and {len(there)} deltas")
    return {
        "generating_replica": latencies(here, emitted),
        "other_replica": latencies(there, emitted),
        "other_after_generating": latencies(there, here),  # each delta: b's receipt - a's
    }


def main() -> None:
    ctx = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory() as tmp,
        ProcessPoolExecutor(max_workers=1, mp_context=ctx) as clients,
        database("omni_bench") as url,
    ):
        upgrade(url)
        db_path = f"{tmp}/bench.db"
        found = pipeline("sqlite", db_path, lambda: sqlite_deltas(db_path), clients)
        found += pipeline("postgres", url, lambda: postgres_deltas(url), clients)
        follow_figures = followers(url)

    by = {(r["backend"], r["clients"]): r for r in found}
    failures = [
        f"{r['backend']} N={r['clients']}: {r['deltas_received']} received, "
        f"{r['deltas_persisted']} persisted, {r['expected']} expected"
        for r in found
        if not r["deltas_received"] == r["deltas_persisted"] == r["expected"]
    ]
    here, there = follow_figures["generating_replica"], follow_figures["other_replica"]
    result = {
        "engine": "SYNTHETIC (bench/_synthetic.py): no model, numbered tokens as fast as asked",
        "tokens_each": ARGS.tokens,
        "pipeline": found,
        "postgres_over_sqlite": {
            str(n): by[("postgres", n)]["events_per_s"] / by[("sqlite", n)]["events_per_s"]
            for n in ARGS.levels
        },
        "followers": {**follow_figures, "interval_ms": ARGS.interval_ms},
        "other_replica_extra_ms": {
            "p50": there["p50_ms"] - here["p50_ms"],
            "p99": there["p99_ms"] - here["p99_ms"],
        },
        "failures": failures,
    }
    print(f"event pipeline (SYNTHETIC engine), streamed /v1/responses, {ARGS.tokens} deltas each")
    print(f"{'clients':>8}{'SQLite ev/s':>14}{'PostgreSQL ev/s':>17}{'PG / SQLite':>13}")
    for n in ARGS.levels:
        lite, pg = by[("sqlite", n)]["events_per_s"], by[("postgres", n)]["events_per_s"]
        print(f"{n:>8}{lite:>14,.0f}{pg:>17,.0f}{pg / lite:>13.2f}")
    print(
        f"followers of one background response on replica a, a delta every "
        f"{ARGS.interval_ms} ms ({here['deltas']} deltas each), emit -> client:"
    )
    for side, figures in (("through a (generating)", here), ("through b (other)", there)):
        print(
            f"  {side:<24} p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms,"
            f" max {figures['max_ms']:.2f} ms"
        )
    extra = result["other_replica_extra_ms"]
    later = follow_figures["other_after_generating"]
    print(
        f"  the other replica's extra latency: p50 {extra['p50']:+.2f} ms,"
        f" p99 {extra['p99']:+.2f} ms; each delta reached b's client after a's by"
        f" p50 {later['p50_ms']:.2f} ms, p99 {later['p99_ms']:.2f} ms"
    )
    verdict = "all persisted and received" if not failures else "MISMATCH"
    print(f"verified against the events tables: {verdict}")
    write_results("replicas", result)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--levels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1, 16, 64],
        help="numbers of concurrent clients, comma separated (default: 1,16,64)",
    )
    p.add_argument("--tokens", type=int, default=1000, help="deltas each client asks for")
    p.add_argument("--follow-tokens", type=int, default=2000, help="deltas the followers read")
    p.add_argument("--interval-ms", type=float, default=5.6, help="between the followed deltas")
    ARGS = p.parse_args()
    main()
