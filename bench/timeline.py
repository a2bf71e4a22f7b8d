"""Where each round of a concurrency run went: the clients' timeline beside the engines' step
traces (they share Linux's monotonic clock).

    BENCH_OMNI_ENV=OMNI_ENGINE_TRACE=omni_trace.json \\
        python bench/concurrency.py --levels 64 --trace raw_trace.json ...
    python bench/timeline.py bench/out/concurrency.json omni_trace.json raw_trace.json

For each of Omni's rounds (ms from the round's start): when the requests were sent, when the
engine received the first and the last of them, its prefill steps (how many, their time, when
the last ended), the median first token at the clients, the engine's last step, when the
clients' streams ended, and the median decode step with the batch (nearly) full. For each raw
BatchGenerator round the same engine-side figures. Between the two: what HTTP, the log and
SSE add at the start (arrivals) and at the end (the last tokens' way out), and whether the
engine's own steps differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

# Fields of a step-trace row (omni.engine.batching.TRACE_FIELDS).
T, STEP_S, ARRIVED, WAITING, RUNNING, PREFILL_TOKENS, PREFILL_S = range(7)


def ms(seconds: float | None) -> str:
    return "      -" if seconds is None else f"{seconds * 1000:7.1f}"


def decode_median(steps: list[list[float]], full: int) -> float | None:
    """The median step without prefill, with at least 90% of `full` decoding."""
    times = [r[STEP_S] for r in steps if r[PREFILL_TOKENS] == 0 and r[RUNNING] >= 0.9 * full]
    return statistics.median(times) if times else None


def omni_round(level: int, line: dict[str, Any], trace: list[list[float]]) -> str:
    start = line["start"]
    end = start + max(line["ended"])
    steps = [r for r in trace if start <= r[T] <= end + 0.05]  # its last step ends before
    arrivals = [r for r in steps if r[ARRIVED] > 0]
    got, all_in = 0, None
    for r in arrivals:
        got += int(r[ARRIVED])
        if got >= level and all_in is None:
            all_in = r[T] - start
    prefills = [r for r in steps if r[PREFILL_TOKENS] > 0]
    final = last_step(steps)
    first_in = arrivals[0][T] - arrivals[0][STEP_S] - start if arrivals else None
    return (
        f"sent {ms(line['sent'][0])}..{ms(line['sent'][-1])} | engine got first "
        f"{ms(first_in)} all {ms(all_in)} | prefill steps {len(prefills)}, "
        f"{ms(sum(r[PREFILL_S] for r in prefills))} ms, last ended "
        f"{ms(prefills[-1][T] - start if prefills else None)} | first token p50 "
        f"{ms(statistics.median(line['first']))} | engine's last step "
        f"{ms(final[T] - start if final else None)} | streams ended "
        f"{ms(line['ended'][0])}..{ms(line['ended'][-1])} | decode step "
        f"{ms(decode_median(steps, level))}"
    )


def last_step(steps: list[list[float]]) -> list[float] | None:
    """The step in which the last job ended. Omni's rows count the jobs running after their
    step (its last step's is 0: the row after the last busy one); raw's count them before
    (its last step is the last busy row, with no row after it in the round)."""
    busy = [i for i, r in enumerate(steps) if r[RUNNING] > 0]
    if not busy:
        return None
    return steps[busy[-1] + 1] if busy[-1] + 1 < len(steps) else steps[busy[-1]]


def raw_rounds(trace: list[list[float]]) -> list[list[list[float]]]:
    """Raw's rounds: each begins with a step that received all its prompts at once."""
    rounds: list[list[list[float]]] = []
    for r in trace:
        if r[ARRIVED] > 0 and r[ARRIVED] == r[RUNNING]:
            rounds.append([r])
        elif rounds:
            rounds[-1].append(r)
    return rounds


def raw_round(steps: list[list[float]]) -> str:
    level = int(steps[0][RUNNING])
    start = steps[0][T] - steps[0][STEP_S]
    final = last_step(steps)
    prefills = [r for r in steps if r[PREFILL_TOKENS] > 0]
    return (
        f"N={level}: prefill steps {len(prefills)}, "
        f"{ms(sum(r[PREFILL_S] for r in prefills))} ms, last ended "
        f"{ms(prefills[-1][T] - start if prefills else None)} | last step "
        f"{ms(final[T] - start if final else None)} | decode step "
        f"{ms(decode_median(steps, level))}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("concurrency", type=Path, help="concurrency.py's JSON (run with --trace)")
    p.add_argument("omni_trace", type=Path, help="Omni's step trace (OMNI_ENGINE_TRACE)")
    p.add_argument("raw_trace", type=Path, nargs="?", help="raw's step trace (--trace)")
    args = p.parse_args()
    result = json.loads(args.concurrency.read_text())
    omni = json.loads(args.omni_trace.read_text())["rows"]
    print("ms from each round's start")
    for level, row in result["omni_chat_stream"].items():
        if "timeline" not in row:
            raise SystemExit("no timeline in that file: run concurrency.py with --trace")
        for k, line in enumerate(row["timeline"]):
            print(f"omni N={level} round {k}: {omni_round(int(level), line, omni)}")
    if args.raw_trace is not None:
        raw = json.loads(args.raw_trace.read_text())["rows"]
        for k, steps in enumerate(raw_rounds(raw)):  # warm-up rounds included
            print(f"raw round {k} {raw_round(steps)}")


if __name__ == "__main__":
    main()
