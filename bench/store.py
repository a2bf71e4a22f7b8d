"""The event store's commits, one at a time: what an append costs where it commits.

    python bench/store.py [--appends 200] [--model PATH_OR_ID]

A real EventStore on a temp file (WAL, synchronous NORMAL, as `omni serve`), --appends awaited
appends per case, each to a stream of its own:
- a step's delta: 1 row; a step of 64 streams: 64 rows (committed on the event loop);
- a chat completion's last append (3 rows) with its replay-cache row, the index bounded at
  1,024 entries (the default) and full, on the event loop and on the writer's thread (where
  such appends went before: the thread's hand-over plus the old trim, `key NOT IN (newest)`);
- the same with the index bounded at 100,000 and full (the most that still commits on the loop).
For scale, raw mlx_lm.stream_generate's time per token on --model (default SmolLM2), in the
same run: each cost is printed as a share of it. Prints p50/p99 µs per case and writes
bench/out/store.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plot import Bars, write_results  # noqa: E402
from pipeline import raw_tps  # noqa: E402

from omni.db import upgrade  # noqa: E402
from omni.events import Append, CacheEntry, EventStore, NewEvent  # noqa: E402
from omni.events import store as store_module  # noqa: E402

DELTA = NewEvent("response.output_text.delta", '{"type":"response.output_text.delta","delta":"x"}')


def finishing(stream: str) -> Append:
    """A chat completion's last append: its final chunk, usage chunk and end."""
    return Append(stream, 0, [DELTA, DELTA, NewEvent("done", "[DONE]")])


async def timed(
    store: EventStore, n: int, make: Callable[[int], tuple[list[Append], list[CacheEntry]]]
) -> list[float]:
    seconds = []
    for i in range(n):
        appends, cache = make(i)
        start = time.perf_counter()
        await store.append(appends, cache=cache)
        seconds.append(time.perf_counter() - start)
    return seconds


async def fill(store: EventStore, entries: int) -> None:
    """The replay-cache index full: `entries` rows, older than what the cases add."""
    old = int(time.time() * 1000) - 60_000
    await store.cache_rebuild(
        [
            CacheEntry(f"fill{i}", f"chatcmpl-fill{i}", created_at=old + i // 100)
            for i in range(entries)
        ]
    )


async def cases(path: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    store = EventStore(path)
    await store.open()
    try:
        tag = iter(range(1 << 30))
        out["1 row (a step's delta), loop"] = await timed(
            store, n, lambda i: ([Append(f"d{next(tag)}", 0, [DELTA])], [])
        )
        out["64 rows (a step of 64 streams), loop"] = await timed(
            store, n, lambda i: ([Append(f"s{next(tag)}.{k}", 0, [DELTA]) for k in range(64)], [])
        )

        def last(i: int) -> tuple[list[Append], list[CacheEntry]]:
            stream = f"chatcmpl-{next(tag)}"
            return [finishing(stream)], [CacheEntry(f"key-{stream}", stream)]

        await fill(store, store.cache_max_entries)
        out["last append + cache row, 1,024 entries, loop"] = await timed(store, n, last)
        direct, store._direct = store._direct, None  # the writer's thread, as before
        try:
            out["last append + cache row, 1,024 entries, thread"] = await timed(store, n, last)
        finally:
            store._direct = direct
        store.cache_max_entries = store_module.DIRECT_CACHE_ENTRIES
        await fill(store, store.cache_max_entries)
        out["last append + cache row, 100,000 entries, loop"] = await timed(store, n, last)
        return out
    finally:
        await store.close()


def old_trim_run(path: str, n: int) -> list[float]:
    """The index upkeep as it was (`key NOT IN (the newest 1,024)`), on the writer's thread:
    patched in for this case only, to show what the change saved."""
    from sqlalchemy import select

    from omni.events.schema import chat_cache

    async def run() -> list[float]:
        store = EventStore(path)
        await store.open()
        store._direct = None
        write = store._write

        async def with_old_trim(fn: Any, then: Any = None) -> Any:
            def both(conn: Any) -> Any:
                result = fn(conn)
                newest = (
                    select(chat_cache.c.key)
                    .order_by(chat_cache.c.created_at.desc())
                    .limit(store.cache_max_entries)
                )
                conn.execute(chat_cache.delete().where(chat_cache.c.key.not_in(newest)))
                return result

            return await write(both, then=then)

        index = store._index  # its insert and expiry, without the new trim
        store._index = lambda cache, now, most=-1: index(cache, now, most)[:2]  # type: ignore[method-assign]
        store._write = with_old_trim  # type: ignore[method-assign]
        try:
            await fill(store, store.cache_max_entries)
            k = iter(range(1 << 30))

            def last(i: int) -> tuple[list[Append], list[CacheEntry]]:
                stream = f"chatcmpl-old{next(k)}"
                return [finishing(stream)], [CacheEntry(f"key-{stream}", stream)]

            return await timed(store, n, last)
        finally:
            await store.close()

    return asyncio.run(run())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/store.db"
        upgrade(path)
        results = asyncio.run(cases(path, ARGS.appends))
        path2 = f"{tmp}/old.db"
        upgrade(path2)
        results["last append + cache row, 1,024 entries, thread, old trim"] = old_trim_run(
            path2, ARGS.appends
        )
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
