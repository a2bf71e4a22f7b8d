"""The event store's commits, one at a time: what an append costs where it commits.

    python bench/store.py [--appends 200] [--model PATH_OR_ID]

A real EventStore on a temp file (WAL, synchronous NORMAL, as `omni serve`), --appends awaited
appends per case, each to a stream of its own:
- a step's delta: 1 row; a step of 64 streams: 64 rows (committed on the event loop);
- a stored deterministic chat completion's last append (3 rows), which the database's trigger
  indexes in the replay cache, the index bounded at 1,024 entries (the default) and full, on
  the event loop and on the writer's thread;
- the same with the index bounded at 100,000 and full (the most still trimmed on the loop).
For scale, raw mlx_lm.stream_generate's time per token on --model (default SmolLM2), in the
same run: each cost is printed as a share of it. Prints p50/p99 µs per case and writes
bench/out/store.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import Bars, write_results  # noqa: E402
from pipeline import raw_tps  # noqa: E402

from omni.db import upgrade  # noqa: E402
from omni.events import Append, EventStore, NewEvent  # noqa: E402
from omni.events import store as store_module  # noqa: E402

DELTA = NewEvent("response.output_text.delta", '{"type":"response.output_text.delta","delta":"x"}')


def finishing(stream: str) -> Append:
    """A chat completion's last append: its final chunk, usage chunk and end."""
    return Append(stream, 0, [DELTA, NewEvent("chat.completion.usage", "{}"), DELTA])


def opening(stream: str) -> Append:
    """Its request, appended beforehand (untimed): stored, deterministic, so replayable."""
    request = {"kind": "chat", "body": {"store": True}, "key": f"key-{stream}"}
    return Append(f"{stream}/request", 0, [NewEvent("omni.request.accepted", json.dumps(request))])


Case = Callable[[int], tuple[list[Append], list[Append]]]  # (untimed first, timed)


async def timed(store: EventStore, n: int, make: Case) -> list[float]:
    seconds = []
    for i in range(n):
        before, appends = make(i)
        if before:
            await store.append(before)
        start = time.perf_counter()
        await store.append(appends)
        seconds.append(time.perf_counter() - start)
    return seconds


def fill(store: EventStore, entries: int) -> None:
    """The replay-cache index full: `entries` rows, older than what the cases add."""
    old = int(time.time() * 1000) - 60_000
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM chat_cache")
        conn.executemany(
            "INSERT INTO chat_cache VALUES (?,?,?)",
            [(f"fill{i}", f"chatcmpl-fill{i}", old + i // 100) for i in range(entries)],
        )
    conn.close()


async def cases(path: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    store = EventStore(path)
    await store.open()
    try:
        tag = iter(range(1 << 30))
        out["1 row (a step's delta), loop"] = await timed(
            store, n, lambda i: ([], [Append(f"d{next(tag)}", 0, [DELTA])])
        )
        out["64 rows (a step of 64 streams), loop"] = await timed(
            store, n, lambda i: ([], [Append(f"s{next(tag)}.{k}", 0, [DELTA]) for k in range(64)])
        )

        def last(i: int) -> tuple[list[Append], list[Append]]:
            stream = f"chatcmpl-{next(tag)}"
            return [opening(stream)], [finishing(stream)]

        fill(store, store.cache_max_entries)
        out["last append, indexed, 1,024 entries, loop"] = await timed(store, n, last)
        direct, store._direct = store._direct, None  # the writer's thread, as before
        try:
            out["last append, indexed, 1,024 entries, thread"] = await timed(store, n, last)
        finally:
            store._direct = direct
        store.cache_max_entries = store_module.DIRECT_CACHE_ENTRIES
        fill(store, store.cache_max_entries)
        out["last append, indexed, 100,000 entries, loop"] = await timed(store, n, last)
        return out
    finally:
        await store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/store.db"
        upgrade(path)
        results = asyncio.run(cases(path, ARGS.appends))
    model_id, tps = raw_tps(ARGS.model)
    token_us = 1e6 / tps
    rows = {}
    print(f"{'append':<58}{'p50 µs':>9}{'p99 µs':>9}{'p50 / raw token':>17}")
    for name, seconds in results.items():
        us = sorted(s * 1e6 for s in seconds)
        p50, p99 = statistics.median(us), us[min(len(us) - 1, int(0.99 * len(us)))]
        rows[name] = {
            "n": len(us),
            "p50_us": p50,
            "p99_us": p99,
            "share_of_raw_token": p50 / token_us,
        }
        print(f"{name:<58}{p50:>9.0f}{p99:>9.0f}{p50 / token_us:>16.2%}")
    print(
        f"raw mlx_lm.stream_generate ({model_id}): {tps:.1f} tokens/s here, "
        f"{token_us / 1000:.1f} ms a token"
    )
    result = {
        "appends": ARGS.appends,
        "raw_model": model_id,
        "raw_tokens_per_s": tps,
        "cases": rows,
    }
    write_results(
        "store",
        result,
        [Bars("one append, p50", "µs", {k: v["p50_us"] for k, v in rows.items()}, "{:.0f}")],
        "event store commits",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--appends", type=int, default=200, help="awaited appends per case")
    p.add_argument("--model", default=None, help="model of the raw mlx-lm scale (default: SmolLM2)")
    ARGS = p.parse_args()
    main()
