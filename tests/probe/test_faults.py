"""The fault scenarios at CI size: kill -9 rounds and a burst of clients."""

from __future__ import annotations

from pathlib import Path

from tests.probe.crash import kill_rounds
from tests.probe.load import load
from tests.test_cli import serving


def test_kill_9_rounds_lose_no_event_and_leave_no_stream_open(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    probe = kill_rounds(tiny_model_dir, tmp_path / "omni.db", rounds=2)
    tally = probe.tally
    assert tally["kill -9 rounds"] == 2
    assert tally["events seen"] > 0
    assert tally["events lost"] == 0, tally
    assert tally["stream checks"] > 0
    assert tally["streams left unended"] == 0, probe.unended


def test_a_burst_of_clients_gets_only_good_answers(tiny_model_dir: Path, tmp_path: Path) -> None:
    with serving(tiny_model_dir, tmp_path / "omni.db") as (base, _):
        tally = load(base, clients=16, requests=4)
    assert tally["requests"] == 64
    assert tally["errors"] == 0 and tally["hangs"] == 0, tally
