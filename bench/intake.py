"""Intake CPU: the event loop's CPU per streamed chat completion, from the app's ASGI call until
its job's submit to the engine returns, inside `omni serve` on a tiny random-weight llama.

    python bench/intake.py [--rounds 40] [--burst 8] [--singles 40] [--max-tokens 2]
                           [--tree DIR ...] [--profile FILE] [--keep-trace FILE]

`omni serve` runs with bench/intake_trace on its PYTHONPATH, which marks each request's ASGI
call and its submit's return with the loop thread's CPU time (time.thread_time). The requests
are the ones bench/concurrency.py sends: streamed /v1/chat/completions, temperature 0, a short
distinct user message, `Cache-Control: no-cache`. Bursts of --burst requests sent at once (the
loop takes them in one after another, so the last job leaves after all of them): loop CPU
from the first ASGI call to the last submit's return, over --burst; then singles, one request
at a time: its own ASGI call to its submit's return. Medians over the rounds, after 5
unmeasured ones. Each --tree (a checkout; default this one) gets a server of its own, all
started at once, and their rounds alternate, so that a machine whose speed drifts weighs on
each alike: two trees compare a change with its base. --profile FILE: a cProfile (CPU time)
of the loop thread of the first tree's server from each request's ASGI call to its submit
(`python -m pstats FILE`); --keep-trace FILE: the first tree's marks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _server import bench_omni_env, chat_body, model_or_tiny, start_omni  # noqa: E402

WARMUP = 5
GAP_S = 0.3  # between rounds: the trace tells rounds apart by their silence


async def one(client: httpx.AsyncClient, text: str, max_tokens: int) -> None:
    body = chat_body("tiny", text, max_tokens)
    headers = {"Cache-Control": "no-cache"}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        r.raise_for_status()
        async for _ in r.aiter_lines():
            pass


async def drive(bases: list[str], args: argparse.Namespace) -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=args.burst)
    clients = [httpx.AsyncClient(base_url=b, timeout=120, limits=limits) for b in bases]
    try:
        for r in range(WARMUP + args.rounds):
            for client in clients:
                texts = [f"Tell me a story about {r} and {i}." for i in range(args.burst)]
                await asyncio.gather(*(one(client, t, args.max_tokens) for t in texts))
                await asyncio.sleep(GAP_S)
        for r in range(args.singles):
            for client in clients:
                await one(client, f"One story about {r}.", args.max_tokens)
                await asyncio.sleep(GAP_S)
    finally:
        for client in clients:
            await client.aclose()


def rounds(marks: list[list[Any]]) -> list[list[list[Any]]]:
    """The marks, split where the loop was silent for over half a gap."""
    out: list[list[list[Any]]] = []
    for m in sorted(m for m in marks if m[3] >= 0):
        if out and m[0] - out[-1][-1][0] < GAP_S / 2:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def figures(marks: list[list[Any]], burst: int) -> dict[str, list[float]]:
    """Per round, ms: loop CPU per request (bursts) and a single's own ASGI -> submit CPU."""
    per_burst, singles, spans = [], [], []
    for group in rounds(marks):
        asgis = [m for m in group if m[2] == "asgi"]
        submits = [m for m in group if m[2] == "submitted"]
        if len(asgis) != len(submits) or not submits:
            continue
        if len(submits) == burst:
            per_burst.append((submits[-1][1] - asgis[0][1]) * 1000 / burst)
            spans.append((submits[-1][0] - asgis[0][0]) * 1000)
        elif len(submits) == 1:
            singles.append((submits[0][1] - asgis[0][1]) * 1000)
    return {"burst": per_burst[WARMUP:], "span": spans[WARMUP:], "single": singles}


def serve(tree: Path, tmp: Path, model: str, traced: bool) -> tuple[Any, str, Path]:
    """`omni serve` from checkout `tree`, traced; the process, its URL and its trace's path."""
    trace = tmp / "trace.json"
    first = [bench_omni_env()["PYTHONPATH"]] if "PYTHONPATH" in bench_omni_env() else []
    env = {
        "PYTHONPATH": os.pathsep.join([*first, str(HERE / "intake_trace"), str(tree)]),
        "INTAKE_ROOT": str(tree),
        "INTAKE_TRACE": str(trace),
    }
    if traced and ARGS.profile:
        env["INTAKE_PROFILE"] = str(Path(ARGS.profile).resolve())
    here = os.getcwd()
    os.chdir(tree)  # `python -m omni` imports from its working directory first
    try:
        proc, base = start_omni(model, tmp / "intake.db", env=env)
    finally:
        os.chdir(here)
    return proc, base, trace


def read_trace(trace: Path, tree: Path) -> list[list[Any]]:
    for _ in range(100):  # written as the server exits
        if trace.exists():
            break
        time.sleep(0.1)
    marks: list[list[Any]] = json.loads(trace.read_text())
    served = next(m[2][5:] for m in marks if m[2].startswith("omni "))  # the checkout
    assert Path(served) == tree, f"{served} served, not {tree}"
    return marks


def main() -> None:
    trees = [Path(t).resolve() for t in ARGS.tree] or [HERE.parent]
    with tempfile.TemporaryDirectory() as tmp:
        model, _ = model_or_tiny(None, Path(tmp))
        servers = []
        try:
            for i, tree in enumerate(trees):
                (Path(tmp) / str(i)).mkdir()
                servers.append(serve(tree, Path(tmp) / str(i), model, i == 0))
            asyncio.run(drive([base for _, base, _ in servers], ARGS))
        finally:
            for proc, _, _ in servers:
                proc.terminate()
                proc.wait(timeout=60)
        results = []
        for tree, (_, _, trace) in zip(trees, servers, strict=True):
            marks = read_trace(trace, tree)
            if ARGS.keep_trace and not results:
                Path(ARGS.keep_trace).write_text(json.dumps(marks))
            results.append(figures(marks, ARGS.burst))
    print(f"loop CPU per request, ms (medians; mean in brackets), {ARGS.rounds} bursts of ", end="")
    print(f"{ARGS.burst} and {ARGS.singles} singles alternating between the trees")
    for tree, got in zip(trees, results, strict=True):
        med = {k: statistics.median(v) if v else float("nan") for k, v in got.items()}
        mean = {k: statistics.mean(v) if v else float("nan") for k, v in got.items()}
        print(
            f"  {str(tree):<24} burst {med['burst']:.3f} [{mean['burst']:.3f}]  single "
            f"{med['single']:.3f} [{mean['single']:.3f}]  first ASGI -> last submit "
            f"{med['span']:.1f} ms"
        )
    if len(trees) == 2:
        a, b = (statistics.median(r["burst"]) for r in results)
        c, d = (statistics.median(r["single"]) for r in results if r["single"]) or (1, 1)
        print(f"  second / first: burst {b / a:.3f}, single {d / c:.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=40, help="measured bursts (default 40)")
    p.add_argument("--burst", type=int, default=8, help="requests sent at once (default 8)")
    p.add_argument("--singles", type=int, default=40, help="requests one at a time (default 40)")
    p.add_argument("--max-tokens", type=int, default=2, help="tokens each asks for (default 2)")
    p.add_argument(
        "--tree", action="append", default=[], help="a checkout to serve (repeat to compare)"
    )
    p.add_argument("--profile", default=None, help="cProfile of the loop thread to this file")
    p.add_argument("--keep-trace", default=None, help="write the first tree's marks here too")
    ARGS = p.parse_args()
    main()
