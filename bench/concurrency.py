"""Concurrency: aggregate tokens/s and TTFT at 1-64 streams, against raw BatchGenerator.

As concurrent streams grow, through Omni, through mlx_lm.server (the peer), and through raw
mlx-lm BatchGenerator.

    python bench/concurrency.py [--model PATH_OR_ID] [--levels 1,2,4,8,16,32,64] [--tokens 64]
                                [--rounds 2] [--warmup-rounds 1]
                                [--requests-per-client 1] [--max-batch N] [--skip-peer]
                                [--client-procs P] [--client-cpus auto|none|LIST]
                                [--raw-prefill-group G]

At each level N, N clients (asyncio + httpx.AsyncClient, spread over P processes so that the
load generator is not what limits a round; default half the CPUs; with 8 CPUs or more they
run on the second half of the physical cores and the servers and raw on the first, so that the
load generator does not take CPU from what it measures: --client-cpus) send N streamed
/v1/chat/completions at once (temperature 0, max_tokens --tokens, distinct prompts, and
`Cache-Control: no-cache` so Omni's replay cache cannot answer), --rounds times after
--warmup-rounds unmeasured ones (new batch shapes compile kernels the first time). With
--requests-per-client R > 1 each client sends R requests one after another (a closed loop: the
batch stays full instead of ramping up and draining once per round). Aggregate
tok/s = completion tokens of a round / its wall time (median over rounds); TTFT = request sent
-> first content delta, p50/p95 over every request of the level. Each level also reports the
CPU seconds a round took in the clients, the server process and the processes below it (Omni's
engine), and raw's process its own: the one near the round's wall time is the one that limits it.
1. Omni: `omni serve` (a subprocess on a temp db, --max-batch-size N_max).
2. Peer: `python -m mlx_lm.server --model <folder>` (--decode-concurrency N_max), same requests.
3. Raw: a BatchGenerator (completion_batch_size N_max) in a process of its own, loaded beside
   Omni, gets the same N token prompts inserted at once, in rounds that alternate with Omni's
   (so a machine whose speed drifts weighs on both alike); TTFT = insert -> first token of each.
N_max (--max-batch) defaults to the largest level, so no level queues behind the batch size.
Prompts prefilled at a time: the peer 8 (its default); Omni its own (16 on CUDA, else 8;
OMNI_PREFILL_GROUP through BENCH_OMNI_ENV sets it); raw --raw-prefill-group (default 8,
mlx-lm's). The JSON records each.
Raw's process and the client processes set their heap aside (omni.heap) as Omni's do.
Prints a table with the ratios server/raw and writes bench/out/concurrency.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Lines, write_results  # noqa: E402
from _server import (  # noqa: E402
    RawWorker,
    bench_omni_env,
    chat_body,
    chat_ids,
    cpu_list,
    cpu_seconds,
    engine_form,
    free_port,
    split_cpus,
    start_omni,
    wait_up,
)

NO_CACHE = {"Cache-Control": "no-cache"}
TOPICS = [
    "a lighthouse keeper",
    "a lost robot",
    "the first snow of winter",
    "a market in Marrakesh",
    "a chess match",
    "an old violin",
    "a night train",
    "a beekeeper",
]


def prompt_text(level: int, rnd: int, i: int) -> str:
    # The request number comes first, so two prompts share only the chat template's prefix.
    return f"Request {level}.{rnd}.{i}: write a short story about {TOPICS[i % len(TOPICS)]}."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(rounds: list[tuple[int, float]], ttfts: list[float]) -> dict[str, Any]:
    """rounds: (tokens, wall seconds) of each round; ttfts: seconds, every request."""
    return {
        "tokens_per_round": [t for t, _ in rounds],
        "wall_s_per_round": [w for _, w in rounds],
        "agg_tps": statistics.median(t / w for t, w in rounds),
        "ttft_p50_ms": statistics.median(ttfts) * 1000,
        "ttft_p95_ms": percentile(ttfts, 0.95) * 1000,
    }


# --- HTTP servers (Omni and mlx_lm.server) ---------------------------------------------


def start_peer(model_path: str, max_batch: int, log: Path) -> tuple[Any, str]:
    """mlx_lm.server logs every request on stderr: that goes to `log`."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_lm.server",
            "--model",
            model_path,
            "--port",
            str(port),
            "--log-level",
            "WARNING",
            "--decode-concurrency",
            str(max_batch),
        ],
        env={**os.environ},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_up(proc, f"{base}/health", "mlx_lm.server")
    except SystemExit:
        print(log.read_text()[-4000:], file=sys.stderr)
        raise
    return proc, base


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def one_stream(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[float, int, float, float]:
    """(seconds to the first content delta, completion tokens, when it was sent, when it
    ended) of one streamed chat; the times on perf_counter's clock, which the engine's step
    trace shares."""
    start = time.perf_counter()
    first = 0.0
    tokens = 0
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=NO_CACHE) as r:
        r.raise_for_status()
        if r.headers.get("x-omni-cache") == "hit":
            raise RuntimeError("answered from the replay cache: the prompts are not distinct")
        async for line in r.aiter_lines():
            # Only the chunks up to the first content and the usage chunk are parsed: the
            # load generator's own work must not be what holds a round back.
            if not line.startswith("data: {") or (first and '"completion_tokens"' not in line):
                continue
            chunk = json.loads(line[6:])
            if not first and any(c["delta"].get("content") for c in chunk["choices"]):
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    return (first or end) - start, tokens, start, end


def http_levels(
    base: str, model: str, label: str, pid: int, raw: RawBatch | None = None
) -> dict[int, dict[str, Any]]:
    """Every level through one server (`raw`: a raw round of the same level follows each of
    its rounds). The clients run in --client-procs processes (asyncio +
    httpx in each), so that parsing thousands of SSE chunks a second does not make the load
    generator what limits a round. `pid`: the server's process, whose CPU time (and its
    children's) each round is noted beside the clients': whichever is near the round's wall
    time is what holds it back."""
    ctx = multiprocessing.get_context("spawn")
    procs = max(1, ARGS.client_procs)  # levels below it leave some processes idle
    pipes, workers = [], []
    for _ in range(procs):
        mine, theirs = ctx.Pipe()
        worker = ctx.Process(
            target=client_process,
            args=(theirs, base, model, ARGS.tokens, CLIENT_CPUS),
            daemon=True,
        )
        worker.start()
        theirs.close()  # the child's end lives in the child: its exit ends our recv
        pipes.append(mine)
        workers.append(worker)

    def run(
        texts: list[list[str]],
    ) -> tuple[list[tuple[float, int, float, float]], float, float]:
        """Each client's texts, one after another, all clients at once: (ttft, tokens, sent,
        ended) of every request, the wall time, the clients' CPU seconds."""
        start = time.perf_counter()
        for k, pipe in enumerate(pipes):
            pipe.send(texts[k::procs])
        done, cpu = [], 0.0
        for pipe in pipes:
            reply = pipe.recv()
            if isinstance(reply, str):
                raise ClientFailed(reply)
            got, used = reply
            done += got
            cpu += used
        return done, time.perf_counter() - start, cpu

    results: dict[int, dict[str, Any]] = {}
    try:
        run([[f"Warm-up for {label}: say hello."]])
        for level in ARGS.levels:
            try:
                results[level] = one_level(level, run, label, pid, raw)
            except ClientFailed as exc:
                if raw is not None:  # Omni's: nothing to compare without it
                    raise SystemExit(f"a client process failed: {exc}") from exc
                # A peer that fails a level (mlx_lm.server has reset connections from 32
                # streams on) is reported so, and its higher levels are not tried.
                print(f"  {label} N={level}: failed: {exc}", file=sys.stderr)
                results[level] = {"failed": str(exc)}
                break
    finally:
        for pipe in pipes:
            try:
                pipe.send(None)
            except OSError:  # that client process is gone already
                pass
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()
    return results


class ClientFailed(Exception):
    """A client process's request failed (the server reset it, or answered an error)."""


def one_level(level: int, run: Any, label: str, pid: int, raw: RawBatch | None) -> dict[str, Any]:
    """--rounds rounds of `level` streams (after --warmup-rounds), through `run` (http_levels')."""
    rounds: list[tuple[int, float]] = []
    ttfts: list[float] = []
    cpu: list[tuple[float, float, float, float]] = []  # clients, server, below, loop
    timeline: list[dict[str, Any]] = []
    reps = ARGS.requests_per_client
    for rnd in range(-ARGS.warmup_rounds, ARGS.rounds):
        # Closed loop: each client sends its next request when the last one ends.
        texts = [
            [prompt_text(level, rnd, i + k * level) for k in range(reps)] for i in range(level)
        ]
        server, below, loop = cpu_seconds(pid)
        start = time.perf_counter()
        done, wall, clients = run(texts)
        server_now, below_now, loop_now = cpu_seconds(pid)
        if raw is not None:
            raw.round(level, rnd)
        if rnd < 0:
            continue  # a warm-up round: new batch shapes compile kernels (MLX's JIT)
        rounds.append((sum(d[1] for d in done), wall))
        ttfts += [d[0] for d in done]
        cpu.append((clients, server_now - server, below_now - below, loop_now - loop))
        # When the round began and each request was sent, reached its first token
        # and ended: beside the engine's step trace, where a round's time went.
        timeline.append(
            {
                "start": start,
                "sent": sorted(d[2] - start for d in done),
                "first": sorted(d[2] + d[0] - start for d in done),
                "ended": sorted(d[3] - start for d in done),
            }
        )
    row = summarize(rounds, ttfts)
    for i, name in enumerate(("clients", "server", "engine", "server_loop")):
        row[f"{name}_cpu_s_per_round"] = [c[i] for c in cpu]
    if ARGS.trace:
        row["timeline"] = timeline
    print(
        f"  {label} N={level}: {row['agg_tps']:.1f} tok/s, "
        f"TTFT p50 {row['ttft_p50_ms']:.1f} ms; CPU s a round (wall "
        f"{statistics.median(row['wall_s_per_round']):.2f}): {ARGS.client_procs} client processes "
        f"{statistics.median(row['clients_cpu_s_per_round']):.2f}, server "
        f"{statistics.median(row['server_cpu_s_per_round']):.2f} (its event loop's "
        f"thread {statistics.median(row['server_loop_cpu_s_per_round']):.2f}), below it "
        f"{statistics.median(row['engine_cpu_s_per_round']):.2f}",
        file=sys.stderr,
    )
    return row


def client_process(
    conn: Any, base: str, model: str, tokens: int, cpus: set[int] | None = None
) -> None:
    """One client process: for each list of clients' texts it gets, runs them all at once and
    sends back (ttft, tokens) of every request and its own CPU seconds for them. `cpus`: the
    CPUs it runs on (--client-cpus)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    # The load generator's own collections must not stop its streams either.
    from omni.heap import set_aside

    set_aside("clients")

    async def serve() -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:

            async def client_loop(texts: list[str]) -> list[tuple[float, int, float, float]]:
                return [await one_stream(client, chat_body(model, t, tokens)) for t in texts]

            loop = asyncio.get_running_loop()
            while (clients := await loop.run_in_executor(None, conn.recv)) is not None:
                mine = time.process_time()
                try:
                    loops = await asyncio.gather(*(client_loop(texts) for texts in clients))
                except Exception as exc:  # reported, not left for the parent to wait on
                    conn.send(f"{type(exc).__name__}: {exc}")
                    return
                conn.send(([d for got in loops for d in got], time.process_time() - mine))

    asyncio.run(serve())


# --- raw BatchGenerator -------------------------------------------------------------------


def raw_worker(
    conn: Any,
    model_path: str,
    tokens: int,
    max_batch: int,
    trace_path: str | None,
    prefill_group: int = 8,
) -> None:
    """Raw BatchGenerator in a process of its own: for each (level, round, n) it gets, the
    first `level` of that round's n prompts at once, each that ends replaced by the next (as
    the closed-loop clients do); it sends back (tokens, wall, each request's TTFT, its CPU
    seconds). None ends."""
    from mlx_lm import load
    from mlx_lm.generate import BatchGenerator

    model, tokenizer = load(model_path)[:2]
    model = engine_form(model)  # the weights and kernels Omni's engine runs
    eos = sorted(tokenizer.eos_token_ids)

    def encode(text: str) -> list[int]:
        return chat_ids(tokenizer, [{"role": "user", "content": text}])

    gen = BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos],
        completion_batch_size=max_batch,
        prefill_batch_size=min(prefill_group, max_batch),
    )
    # --trace: one row per step, as Omni's engine writes with OMNI_ENGINE_TRACE.
    trace: list[tuple[float, ...]] | None = [] if trace_path else None

    def once(prompts: list[list[int]], level: int) -> tuple[int, float, list[float]]:
        start = time.perf_counter()
        queue = list(prompts)
        sent: dict[int, float] = {}

        def insert(batch: list[list[int]]) -> None:
            now = time.perf_counter()
            for uid in gen.insert(batch, max_tokens=[tokens] * len(batch)):
                sent[uid] = now

        insert(queue[:level])
        del queue[:level]
        first: dict[int, float] = {}
        made = 0
        live = set(sent)
        arrived = len(live)
        while live:
            mark = time.perf_counter()
            with gen.stats() as step:
                generated = gen.next_generated()
            if trace is not None:  # the rows of Omni's engine trace (TRACE_FIELDS)
                now = time.perf_counter()
                row = (now, now - mark, arrived, 0, len(live), step.prompt_tokens, step.prompt_time)
                trace.append(row)
                arrived = 0
            for r in generated:
                if r.finish_reason != "stop":  # an end-of-sequence token: not output (as Omni)
                    first.setdefault(r.uid, time.perf_counter())
                    made += 1
                if r.finish_reason is not None:
                    live.discard(r.uid)
                    if queue:
                        insert([queue.pop(0)])
                        live.add(max(sent))
                        arrived += 1
        wall = time.perf_counter() - start
        return made, wall, [first.get(u, start + wall) - t for u, t in sent.items()]

    try:
        once([encode("Warm-up for raw: say hello.")], 1)
        # Raw's process sets its heap aside as Omni's engine does (omni.heap): a full
        # collection there walks the model and the tokenizer too (~200 ms on the H200's host).
        from omni.heap import set_aside

        set_aside("raw")
        conn.send("ready")
        while (asked := conn.recv()) is not None:
            level, rnd, n = asked
            prompts = [encode(prompt_text(level, rnd, i)) for i in range(n)]
            cpu = time.process_time()
            made, wall, firsts = once(prompts, level)
            conn.send((made, wall, firsts, time.process_time() - cpu))
    finally:
        gen.close()
    if trace is not None and trace_path:
        from omni.runtime.chat.observe import write_trace

        write_trace(trace_path, trace)


class RawBatch:
    """Raw BatchGenerator in its own process (RawWorker), a round at a time, and its figures."""

    def __init__(self, model_path: str):
        self._worker = RawWorker(
            raw_worker,
            *(model_path, ARGS.tokens, ARGS.max_batch, ARGS.trace, ARGS.raw_prefill_group),
            like_engine=True,
        )
        if self._worker.reply() != "ready":
            raise SystemExit("raw BatchGenerator did not start")
        self.rounds: dict[int, list[tuple[int, float]]] = {}
        self.ttfts: dict[int, list[float]] = {}
        self.cpu: dict[int, list[float]] = {}  # the raw process's CPU seconds, each round

    def round(self, level: int, rnd: int) -> None:
        made, wall, firsts, cpu = self._worker.ask((level, rnd, level * ARGS.requests_per_client))
        if rnd >= 0:  # not a warm-up round
            self.rounds.setdefault(level, []).append((made, wall))
            self.ttfts.setdefault(level, []).extend(firsts)
            self.cpu.setdefault(level, []).append(cpu)

    def levels(self) -> dict[int, dict[str, Any]]:
        results = {}
        for level in self.rounds:
            results[level] = row = summarize(self.rounds[level], self.ttfts[level])
            row["engine_cpu_s_per_round"] = self.cpu[level]
            print(
                f"  raw N={level}: {row['agg_tps']:.1f} tok/s, "
                f"TTFT p50 {row['ttft_p50_ms']:.1f} ms; CPU s a round (wall "
                f"{statistics.median(row['wall_s_per_round']):.2f}): "
                f"{statistics.median(self.cpu[level]):.2f}",
                file=sys.stderr,
            )
        return results

    def stop(self) -> None:
        self._worker.stop()


# --- report -------------------------------------------------------------------------------


def omni_prefill_group() -> int:
    """The prompts Omni's engine prefills at a time in this run: BENCH_OMNI_ENV's
    OMNI_PREFILL_GROUP, else the engine's own on this device."""
    from omni.runtime.chat.worker import prefill_group
    from omni.settings import engine_knobs

    knobs = engine_knobs({**os.environ, **bench_omni_env()})  # the environment start_omni gives
    return prefill_group(knobs["prefill_group"])


def main() -> None:
    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model

    source = resolve_model(ARGS.model, omni_home(), lambda m: print(m, file=sys.stderr))
    if SPLIT is not None:  # the servers and raw (started from here) inherit these CPUs
        os.sched_setaffinity(0, SPLIT[0])
        print(
            f"CPUs: servers and raw {cpu_list(SPLIT[0])}, clients {cpu_list(SPLIT[1])}",
            file=sys.stderr,
        )
    raw_batch = RawBatch(source.path)
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_omni(
            source.path,
            Path(tmp) / "bench.db",
            *("--max-batch-size", str(ARGS.max_batch)),
            *("--max-queued", str(max(256, 2 * ARGS.max_batch))),
        )
        try:
            model_id = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
            omni = http_levels(base, model_id, "omni", proc.pid, raw_batch)
        finally:
            stop(proc)
            raw_batch.stop()
        peer: dict[int, dict[str, Any]] = {}
        if not ARGS.skip_peer:
            proc, base = start_peer(source.path, ARGS.max_batch, Path(tmp) / "peer.log")
            try:
                peer = http_levels(base, "default_model", "mlx_lm.server", proc.pid)
            finally:
                stop(proc)
    raw = raw_batch.levels()

    def peer_tps(level: int) -> float | None:
        """The peer's tokens/s at `level`; None where it did not run or failed."""
        return peer.get(level, {}).get("agg_tps")

    def ratio(level: int) -> float | None:
        """The peer's: medians over medians (its rounds did not alternate with raw's)."""
        tps = peer_tps(level)
        return None if tps is None else tps / raw[level]["agg_tps"]

    def paired(level: int) -> float:
        """Omni's: the median of each round's ratio to the raw round that followed it."""
        o, r = omni[level], raw[level]
        each = zip(
            o["tokens_per_round"],
            o["wall_s_per_round"],
            r["tokens_per_round"],
            r["wall_s_per_round"],
            strict=True,
        )
        return statistics.median((ot / ow) / (rt / rw) for ot, ow, rt, rw in each)

    result = {
        "model": source.model_id,
        "max_tokens": ARGS.tokens,
        "rounds": ARGS.rounds,
        "warmup_rounds": ARGS.warmup_rounds,
        "requests_per_client": ARGS.requests_per_client,
        "max_batch": ARGS.max_batch,
        "raw_prefill_group": ARGS.raw_prefill_group,
        "omni_prefill_group": omni_prefill_group(),
        "bench_omni_env": os.environ.get("BENCH_OMNI_ENV", ""),
        "client_procs": ARGS.client_procs,
        "cpus": None
        if SPLIT is None
        else {"servers": cpu_list(SPLIT[0]), "clients": cpu_list(SPLIT[1])},
        "levels": ARGS.levels,
        "omni_chat_stream": omni,
        "mlx_lm_server_chat_stream": peer,
        "raw_batch_generator": raw,
        "ratio_agg_tps_omni_over_raw": {n: paired(n) for n in ARGS.levels},
        "ratio_agg_tps_peer_over_raw": {n: ratio(n) for n in ARGS.levels},
        "ratio_agg_tps_omni_over_peer": {
            n: None if (tps := peer_tps(n)) is None else omni[n]["agg_tps"] / tps
            for n in ARGS.levels
        },
    }

    print(
        f"model {source.model_id}, streamed chat, temperature 0, max_tokens {ARGS.tokens}, "
        f"{ARGS.rounds} rounds per level, batch size {ARGS.max_batch} everywhere; omni/raw: "
        "median of each round's ratio to the raw round after it"
    )
    print(f"{'N':>4} | {'aggregate tok/s':^26} | {'ratio to raw':^15} | {'TTFT p50/p95 ms':^42}")
    print(
        f"{'':>4} | {'omni':>8}{'peer':>9}{'raw':>9} | {'omni':>7}{'peer':>8} | "
        f"{'omni':^14}{'peer':^14}{'raw':^14}"
    )

    def ttft(rows: dict[int, dict[str, Any]], n: int) -> str:
        if "failed" in rows.get(n, {}):
            return f"{'failed':^14}"
        if n not in rows:
            return f"{'-':>14}"
        return f"{rows[n]['ttft_p50_ms']:>8.0f}/{rows[n]['ttft_p95_ms']:<5.0f}"

    def num(x: float | None, width: int, fmt: str) -> str:
        return f"{'-':>{width}}" if x is None else f"{x:>{width}{fmt}}"

    for n in ARGS.levels:
        print(
            f"{n:>4} | {omni[n]['agg_tps']:>8.1f}"
            f"{num(peer_tps(n), 9, '.1f')}"
            f"{raw[n]['agg_tps']:>9.1f} | "
            f"{num(paired(n), 7, '.3f')}{num(ratio(n), 8, '.3f')} | "
            f"{ttft(omni, n)}{ttft(peer, n)}{ttft(raw, n)}"
        )
    best = max(ARGS.levels, key=lambda n: omni[n]["agg_tps"])
    print(
        f"omni peaks at N={best}: {omni[best]['agg_tps']:.1f} tok/s "
        f"({paired(best):.3f} of raw BatchGenerator at the same N)"
    )

    series = {"omni (chat SSE)": omni, "mlx_lm.server (chat SSE)": peer, "raw BatchGenerator": raw}
    # Each line over the levels it ran (a peer that failed a level stops there).
    series = {k: {n: r for n, r in v.items() if "agg_tps" in r} for k, v in series.items()}
    series = {k: v for k, v in series.items() if v}
    write_results(
        "concurrency",
        result,
        [
            Lines(
                "aggregate decode throughput",
                "concurrent streams",
                "tokens/s",
                {k: (list(v), [r["agg_tps"] for r in v.values()]) for k, v in series.items()},
                logx=True,
            ),
            Lines(
                "time to first token, p50",
                "concurrent streams",
                "ms",
                {k: (list(v), [r["ttft_p50_ms"] for r in v.values()]) for k, v in series.items()},
                logx=True,
            ),
        ],
        f"concurrency: {source.model_id}, {ARGS.tokens} tokens per request, greedy",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: SmolLM2)")
    p.add_argument(
        "--levels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1, 2, 4, 8, 16, 32, 64],
        help="concurrency levels, comma separated (default: 1,2,4,8,16,32,64)",
    )
    p.add_argument("--tokens", type=int, default=64, help="max_tokens of every request")
    p.add_argument("--rounds", type=int, default=2, help="rounds of N requests per level")
    p.add_argument(
        "--requests-per-client",
        type=int,
        default=1,
        help="closed loop: each client sends this many requests, one after another",
    )
    p.add_argument(
        "--warmup-rounds", type=int, default=1, help="unmeasured rounds first, at each level"
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=None,
        help="batch size of all three (default: the largest level)",
    )
    p.add_argument("--skip-peer", action="store_true", help="leave mlx_lm.server out")
    p.add_argument(
        "--raw-prefill-group",
        type=int,
        default=8,
        help="raw BatchGenerator's prefill_batch_size (default 8, mlx-lm's own default)",
    )
    p.add_argument(
        "--trace",
        default=None,
        help="write raw BatchGenerator's steps here (JSON; set OMNI_ENGINE_TRACE for Omni's)",
    )
    p.add_argument(
        "--client-procs",
        type=int,
        default=max(1, (os.cpu_count() or 1) // 2),
        help="processes the HTTP clients are spread over (default: half the CPUs)",
    )
    p.add_argument(
        "--client-cpus",
        default="auto",
        help="CPUs of the client processes: auto (with 8 CPUs or more, the second half of the "
        "physical cores; the servers and raw run on the rest), none, or a list such as 8-15",
    )
    ARGS = p.parse_args()
    ARGS.max_batch = ARGS.max_batch or max(ARGS.levels)
    SPLIT = split_cpus(ARGS.client_cpus)
    CLIENT_CPUS = None if SPLIT is None else SPLIT[1]
    main()
