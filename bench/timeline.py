"""Where each round of a traced concurrency run went, beside the engines' step traces.

The clients' timeline and the step traces share Linux's monotonic clock.

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

Last, each round's length in decode steps: its end (Omni: the last stream's end at the clients;
raw: its last step) over its own median decode step. The host's decode speed can move between
rounds (on the H200's host a full-batch step took ~5 ms in some rounds and ~8 in others, raw's as
much as Omni's), which the seconds carry and this measure mostly does not: raw's median over
Omni's is the like-for-like ratio with that noise taken out.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

# Fields of a step-trace row (omni.runtime.chat.observe.TRACE_FIELDS).
T, STEP_S, ARRIVED, WAITING, RUNNING, PREFILL_TOKENS, PREFILL_S = range(7)


def ms(seconds: float | None) -> str:
    return "      -" if seconds is None else f"{seconds * 1000:7.1f}"


def decode_median(steps: list[list[float]], full: int) -> float | None:
    """The median step without prefill, with at least 90% of `full` decoding."""
    times = [r[STEP_S] for r in steps if r[PREFILL_TOKENS] == 0 and r[RUNNING] >= 0.9 * full]
    return statistics.median(times) if times else None


def omni_round(
    level: int, line: dict[str, Any], trace: list[list[float]]
) -> tuple[str, float | None]:
    """The round's line, and its length in decode steps."""
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
    step = decode_median(steps, level)
    text = (
        f"sent {ms(line['sent'][0])}..{ms(line['sent'][-1])} | engine got first "
        f"{ms(first_in)} all {ms(all_in)} | prefill steps {len(prefills)}, "
        f"{ms(sum(r[PREFILL_S] for r in prefills))} ms, last ended "
        f"{ms(prefills[-1][T] - start if prefills else None)} | first token p50 "
        f"{ms(statistics.median(line['first']))} | engine's last step "
        f"{ms(final[T] - start if final else None)} | streams ended "
        f"{ms(line['ended'][0])}..{ms(line['ended'][-1])} | decode step {ms(step)} | "
        f"finishing steps {finishing(steps)} | between steps {ms(between(steps))}"
    )
    return in_decode_steps(text, line["ended"][-1], step)


def finishing(steps: list[list[float]], counted_before: bool = False) -> int:
    """Steps in which jobs ended: one for each group that ended apart. Omni's rows count the
    jobs running after their step, raw's before it (its last step, which ends the rest, has no
    row after it: one more)."""
    fell = sum(b[RUNNING] < a[RUNNING] for a, b in zip(steps, steps[1:], strict=False))
    return fell + int(counted_before)


def between(steps: list[list[float]]) -> float:
    """Seconds between the round's steps, its first to the one in which its last job ended (the
    loop's own work: taking in jobs, sending a step's outputs; raw's has next to none)."""
    final = last_index(steps)
    if final is None or final == 0:
        return 0.0
    rows = steps[: final + 1]
    return rows[-1][T] - (rows[0][T] - rows[0][STEP_S]) - sum(r[STEP_S] for r in rows)


def last_index(steps: list[list[float]]) -> int | None:
    """Where the step in which the last job ended is. Omni's rows count the jobs running after
    their step (its last step's is 0: the row after the last busy one); raw's count them before
    (its last step is the last busy row, with no row after it in the round)."""
    busy = [i for i, r in enumerate(steps) if r[RUNNING] > 0]
    if not busy:
        return None
    return busy[-1] + 1 if busy[-1] + 1 < len(steps) else busy[-1]


def last_step(steps: list[list[float]]) -> list[float] | None:
    """The step in which the last job ended (last_index)."""
    i = last_index(steps)
    return None if i is None else steps[i]


def raw_rounds(trace: list[list[float]]) -> list[list[list[float]]]:
    """Raw's rounds: each begins with a step that received all its prompts at once."""
    rounds: list[list[list[float]]] = []
    for r in trace:
        if r[ARRIVED] > 0 and r[ARRIVED] == r[RUNNING]:
            rounds.append([r])
        elif rounds:
            rounds[-1].append(r)
    return rounds


def raw_round(steps: list[list[float]]) -> tuple[str, float | None]:
    """The round's line, and its length in decode steps."""
    level = int(steps[0][RUNNING])
    start = steps[0][T] - steps[0][STEP_S]
    final = last_step(steps)
    prefills = [r for r in steps if r[PREFILL_TOKENS] > 0]
    step = decode_median(steps, level)
    end = final[T] - start if final else None
    text = (
        f"N={level}: prefill steps {len(prefills)}, "
        f"{ms(sum(r[PREFILL_S] for r in prefills))} ms, last ended "
        f"{ms(prefills[-1][T] - start if prefills else None)} | last step "
        f"{ms(end)} | decode step {ms(step)} | finishing steps "
        f"{finishing(steps, counted_before=True)} | between steps {ms(between(steps))}"
    )
    return in_decode_steps(text, end, step)


def in_decode_steps(text: str, end: float | None, step: float | None) -> tuple[str, float | None]:
    """A round's line with its length in decode steps (its end over its median step), and that
    length (None without either)."""
    if not end or not step:
        return text, None
    return f"{text} | in decode steps {end / step:.0f}", end / step


def in_steps(name: str, lengths: list[float]) -> str:
    """Rounds' lengths in decode steps: their median and range."""
    if not lengths:
        return f"{name} -"
    return (
        f"{name} {statistics.median(lengths):.0f} ({min(lengths):.0f}-{max(lengths):.0f}, "
        f"{len(lengths)} rounds)"
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
    omni_steps: dict[int, list[float]] = {}
    for level, row in result["omni_chat_stream"].items():
        if "timeline" not in row:
            raise SystemExit("no timeline in that file: run concurrency.py with --trace")
        for k, line in enumerate(row["timeline"]):
            text, length = omni_round(int(level), line, omni)
            print(f"omni N={level} round {k}: {text}")
            if length is not None:
                omni_steps.setdefault(int(level), []).append(length)
    raw_steps: dict[int, list[float]] = {}
    if args.raw_trace is not None:
        raw = json.loads(args.raw_trace.read_text())["rows"]
        seen: dict[int, int] = {}
        for k, steps in enumerate(raw_rounds(raw)):  # warm-up rounds included
            text, length = raw_round(steps)
            print(f"raw round {k} {text}")
            if k == 0:  # raw's own warm-up (one request), before any level's
                continue
            level = int(steps[0][RUNNING])
            seen[level] = seen.get(level, 0) + 1
            # Then each level's first rounds are the benchmark's warm-up.
            if level in omni_steps and seen[level] > result.get("warmup_rounds", 0):
                if length is not None:
                    raw_steps.setdefault(level, []).append(length)
    print("a round in decode steps (its end over its median decode step), median (range)")
    for level, lengths in omni_steps.items():
        raw_lengths = raw_steps.get(level, [])
        ratio = (
            f"; raw/omni {statistics.median(raw_lengths) / statistics.median(lengths):.3f}"
            if raw_lengths
            else ""
        )
        print(f"N={level}: {in_steps('omni', lengths)}, {in_steps('raw', raw_lengths)}{ratio}")


if __name__ == "__main__":
    main()
