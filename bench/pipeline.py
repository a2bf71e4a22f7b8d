"""Event pipeline capacity: persisted and streamed delta events/s with a SYNTHETIC engine.

No model runs (see _synthetic.py), so this measures Omni's pipeline alone (recorder ->
appender/group commit in SQLite -> notify -> follow -> SSE), not generation.

    python bench/pipeline.py [--levels 1,2,4,8,16,32,64] [--tokens 1000] [--model PATH_OR_ID]

The server is a ServerThread (real Hypercorn) in this process on a temp db. At each level N,
N clients stream POST /v1/responses at once (store true), each asking for --tokens tokens that
the synthetic engine emits as fast as it can. Events/s = output_text.delta events received by
the clients / wall time from the first request to the last stream's end. The clients run in a
separate process (asyncio + httpx.AsyncClient) so they do not share the server's GIL. After
each level the delta rows added to the SQLite events table are counted: they must equal the
deltas received (every streamed delta was persisted first) and N x --tokens.
Target printed beside it: 20,000 events/s. For scale, raw mlx_lm.stream_generate tokens/s of
the default model (--model to change it) from one short run, and events/s / that ratio.
Prints a table and writes bench/out/pipeline.json and bench/out/pipeline.png.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sqlite3
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Lines, write_results  # noqa: E402
from _synthetic import SyntheticEngine  # noqa: E402

from omni.api.app import Settings  # noqa: E402
from tests.server import ServerThread  # noqa: E402

TARGET = 20_000  # events/s
DELTA = "response.output_text.delta"


# --- clients (run in a child process) -------------------------------------------------------


async def _client(client: httpx.AsyncClient, tokens: int) -> int:
    body = {"input": "x", "stream": True, "max_output_tokens": tokens}
    deltas = 0
    async with client.stream("POST", "/v1/responses", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if line == f"event: {DELTA}":
                deltas += 1
    return deltas


async def _level(base: str, n: int, tokens: int) -> tuple[list[int], float]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        start = time.perf_counter()
        counts = await asyncio.gather(*(_client(client, tokens) for _ in range(n)))
        return list(counts), time.perf_counter() - start


def run_level(base: str, n: int, tokens: int) -> tuple[list[int], float]:
    """N concurrent streams: the deltas each received, and the wall time."""
    return asyncio.run(_level(base, n, tokens))


# --- server side ----------------------------------------------------------------------------


def delta_rows(db_path: str) -> int:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        return int(
            conn.execute("SELECT count(*) FROM events WHERE type = ?", (DELTA,)).fetchone()[0]
        )


def raw_tps(model: str | None, tokens: int = 64) -> tuple[str, float]:
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(model, omni_home(), lambda m: print(m, file=sys.stderr))
    loaded = load(source.path)
    model_, tokenizer = loaded[0], loaded[1]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a story."}], add_generation_prompt=True
    )
    last = None
    for _ in range(2):  # the first is a warm-up
        for resp in stream_generate(
            model_, tokenizer, prompt, max_tokens=tokens, sampler=make_sampler(temp=0.0)
        ):
            last = resp
    assert last is not None
    return source.model_id, last.generation_tps


def main() -> None:
    levels: list[int] = ARGS.levels
    rows: list[dict[str, Any]] = []
    ctx = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory() as tmp,
        ProcessPoolExecutor(max_workers=1, mp_context=ctx) as clients,
    ):
        db_path = f"{tmp}/bench.db"
        engine = SyntheticEngine()
        settings = Settings(db_path=db_path, max_queued=max(256, 2 * max(levels)))
        server = ServerThread(settings, engine).start()
        try:
            clients.submit(run_level, server.base_url, 1, 16).result()  # warm-up
            for n in levels:
                before = delta_rows(db_path)
                counts, wall = clients.submit(run_level, server.base_url, n, ARGS.tokens).result()
                received = sum(counts)
                persisted = delta_rows(db_path) - before
                row = {
                    "clients": n,
                    "tokens_each": ARGS.tokens,
                    "deltas_received": received,
                    "deltas_persisted": persisted,
                    "expected": n * ARGS.tokens,
                    "wall_s": wall,
                    "events_per_s": received / wall,
                }
                rows.append(row)
                print(
                    f"  N={n}: {row['events_per_s']:,.0f} delta events/s "
                    f"({received} received, {persisted} persisted)",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    model_id, tps = raw_tps(ARGS.model)

    peak = max(rows, key=lambda r: r["events_per_s"])
    saturated = next(r for r in rows if r["events_per_s"] >= 0.9 * peak["events_per_s"])
    failures = [
        f"N={r['clients']}: {r['deltas_received']} received, {r['deltas_persisted']} persisted, "
        f"{r['expected']} expected"
        for r in rows
        if not r["deltas_received"] == r["deltas_persisted"] == r["expected"]
    ]
    result = {
        "engine": "SYNTHETIC (bench/_synthetic.py): no model, numbered tokens as fast as asked",
        "levels": rows,
        "peak_events_per_s": peak["events_per_s"],
        "peak_at_clients": peak["clients"],
        "saturates_at_clients": saturated["clients"],
        "target_events_per_s": TARGET,
        "raw_mlx_lm": {"model": model_id, "decode_tps": tps},
        "ratio_peak_over_raw_tps": peak["events_per_s"] / tps,
        "failures": failures,
    }

    print(
        "SYNTHETIC engine (bench/_synthetic.py, no model): Omni's event pipeline alone, "
        f"streamed /v1/responses, {ARGS.tokens} deltas per client"
    )
    print(
        f"{'clients':>8}{'deltas recv':>13}{'persisted':>11}{'wall s':>9}{'events/s':>11}", end=""
    )
    print(f"{'vs target':>11}{'vs raw tok/s':>14}")
    for r in rows:
        print(
            f"{r['clients']:>8}{r['deltas_received']:>13}{r['deltas_persisted']:>11}"
            f"{r['wall_s']:>9.2f}{r['events_per_s']:>11,.0f}"
            f"{r['events_per_s'] / TARGET:>11.2f}{r['events_per_s'] / tps:>14.1f}"
        )
    print(
        f"peak {peak['events_per_s']:,.0f} events/s at N={peak['clients']}; saturates at "
        f"N={saturated['clients']} (first level within 90% of the peak); "
        f"target {TARGET:,} events/s: {'met' if peak['events_per_s'] >= TARGET else 'NOT met'}"
    )
    print(
        f"raw mlx_lm.stream_generate ({model_id}) decodes {tps:.1f} tokens/s here: the pipeline "
        f"carries {result['ratio_peak_over_raw_tps']:.1f}x that"
    )
    verdict = "all persisted and received" if not failures else "MISMATCH"
    print(f"verified against the events table: {verdict}")
    write_results(
        "pipeline",
        result,
        [
            Lines(
                "persisted + streamed delta events/s (SYNTHETIC engine)",
                "concurrent streaming clients",
                "events/s",
                {"omni pipeline": (levels, [r["events_per_s"] for r in rows])},
                logx=True,
                hlines={f"target {TARGET:,}/s": TARGET, f"raw mlx-lm {model_id} tok/s": tps},
            )
        ],
        f"event pipeline capacity, {ARGS.tokens} deltas per client",
    )
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--levels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1, 2, 4, 8, 16, 32, 64],
        help="numbers of concurrent clients, comma separated (default: 1,2,4,8,16,32,64)",
    )
    p.add_argument("--tokens", type=int, default=1000, help="deltas each client asks for")
    p.add_argument("--model", default=None, help="model of the raw mlx-lm scale (default: SmolLM2)")
    ARGS = p.parse_args()
    main()
