"""The probe at full size, printing its figures:

    .venv/bin/python -m tests.probe [--examples 3000] [--rounds 22] [--clients 64] [--requests 10]

A tiny random-weight model is built in a temporary folder; each part runs a real
`omni serve` on a database of its own there."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from omni.testing.llama import build_tiny_llama
from tests.probe.crash import kill_rounds
from tests.probe.fuzz import Probe, Request, requests
from tests.probe.load import load
from tests.probe.stall import items, stall
from tests.probe.test_fuzz import known_ids
from tests.test_cli import serving


def fuzz(base: str, examples: int) -> tuple[Counter[str], list[tuple[Request, str]]]:
    with OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as sdk:
        known = known_ids(sdk, base)
    probe = Probe(httpx.Client(base_url=base, timeout=60))
    problems: list[tuple[Request, str]] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        request = data.draw(requests(known))
        problem = probe.send(request)
        if problem is not None:
            problems.append((request, problem))

    run()
    probe.client.close()
    return probe.tally, problems


# The fault scenarios' own tests, each through real `omni serve` processes or a real server.
SCENARIOS = {
    "a full disk under running streams": "tests/api/test_write_faults.py",
    "the database deleted or replaced under the server": "tests/api/test_lost_database.py",
    "a newer, damaged or foreign database at start": "tests/test_cli_database.py",
    "SIGTERM mid-stream, with background work": "tests/test_shutdown.py tests/api/test_shutdown.py",
    "kill -9 mid-generation, then a restart": "tests/test_crash.py",
}


def scenarios() -> None:
    for name, tests in SCENARIOS.items():
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests.split()],
            capture_output=True,
            text=True,
        )
        summary = re.findall(r"\d+ (?:passed|failed|error)", run.stdout)
        print(f"scenario: {name}: {', '.join(summary) or run.stdout[-200:]}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.probe", description=__doc__)
    parser.add_argument("--examples", type=int, default=3000, help="fuzzed requests")
    parser.add_argument("--rounds", type=int, default=22, help="kill -9 rounds")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=10, help="requests per client")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_llama(root / "tiny-llama")
        with serving(model, root / "fuzz.db", "warning", None, "--max-tokens", "4") as (base, _):
            tally, problems = fuzz(base, args.examples)
        print(
            f"fuzz: {tally['requests']} requests, {tally['5xx']} 5xx, {tally['hangs']} hangs, "
            f"{tally['broken']} broken answers ({tally['2xx']} 2xx, {tally['4xx']} 4xx)"
        )
        for request, problem in problems[:20]:
            print(f"  {request!r}: {problem}")
        big = ["--max-body-mb", "64", "--max-tokens", "2"]
        with serving(model, root / "stall.db", "warning", None, *big) as (base, proc):
            for n in (250, 2000, 10000):
                body = {"input": items(n), "truncation": "auto"}
                s = stall(base, proc.pid, "/v1/responses", body)
                print(
                    f"truncation auto, {n} items: {s.status} in {s.seconds:.2f} s, "
                    f"/health waited at most {s.worst_health_s:.2f} s"
                )
            s = stall(base, proc.pid, "/v1/responses", {"input": "word " * 10_000_000})
            print(
                f"a 50 MB input: {s.status} in {s.seconds:.2f} s, /health waited at most "
                f"{s.worst_health_s:.2f} s, server peak RSS {s.peak_rss_mb} MB"
            )
        with serving(model, root / "load.db") as (base, _):
            burst = load(base, args.clients, args.requests)
        print(
            f"load: {args.clients} clients x {args.requests}: {burst['requests']} requests, "
            f"{burst['errors']} errors, {burst['hangs']} hangs"
        )
        rounds = kill_rounds(model, root / "crash.db", args.rounds)
        crash = rounds.tally
        print(
            f"kill -9: {crash['kill -9 rounds']} rounds, {crash['events seen']} events seen "
            f"by clients, {crash['events lost']} lost; {len(rounds.streams)} streams read to their "
            f"end after each restart ({crash['stream checks']} reads), "
            f"{crash['streams left unended']} left unended"
        )
        for line in rounds.unended:
            print(f"  {line}")
    scenarios()


if __name__ == "__main__":
    main()
