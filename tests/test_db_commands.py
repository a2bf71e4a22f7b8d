"""`omni db check | backup | purge` and `serve --retention` as a user types them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from omni import cli
from omni.cli.program import parser


def omni(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "omni.db"
    assert cli.main(["db", "upgrade", "--db", str(path)]) == 0
    return path


def test_retention_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parser().parse_args(["serve"]).retention is None
    assert parser().parse_args(["serve", "--retention", "30d"]).retention == 30 * 86400
    monkeypatch.setenv("OMNI_RETENTION", "12h")
    assert parser().parse_args(["serve"]).retention == 12 * 3600


def test_bad_values_are_one_line_usage_errors(db: Path) -> None:
    for args, fragment in [
        (["serve", "--retention", "soon"], "expected a duration"),
        (["db", "purge", "--db", str(db), "--older-than", "3x"], "expected a duration"),
        (["db", "purge", "--db", str(db), "--before", "tuesday"], "expected an ISO date"),
        (["db", "purge", "--db", str(db), "--older-than", "1d", "--status", "done"], "statuses"),
        (["db", "purge", "--db", str(db)], "one of the arguments --older-than --before"),
        (["db", "purge", "--db", str(db), "--older-than", "1d", "--before", "2025-01-01"], "not"),
    ]:
        result = omni(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and fragment in result.stderr, result.stderr


def test_check_prints_each_problem_and_fails(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["db", "check", "--db", str(db)]) == 0
    assert "is sound (0 events in 0 streams)" in capsys.readouterr().out
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "INSERT INTO events (stream_id, seq, type, data, created_at)"
            " VALUES ('resp_x', 1, 'response.created', '{}', 0)"
        )
    assert cli.main(["db", "check", "--db", str(db)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "resp_x: seq not contiguous from 0: 1 rows, 1..1",
        f"omni: {db}: 1 problems",
    ]


def test_statuses_combine(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["db", "purge", "--db", str(db), "--older-than", "1d", "--dry-run"]
    assert cli.main([*args, "--status", "completed,failed", "--status", "deleted"]) == 0
    assert capsys.readouterr().out == "omni: would remove 0 responses, 0 completions: 0 events\n"


def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    for args in (["check"], ["backup", str(tmp_path / "b.db")], ["purge", "--older-than", "1d"]):
        result = omni("db", *args, "--db", str(tmp_path / "none.db"))
        assert result.returncode == 1 and "no database at" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_file_that_is_no_omni_log_is_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE x (a)")
    for args in (["check"], ["purge", "--older-than", "1d"]):
        result = omni("db", *args, "--db", str(other))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "is not an Omni log (its tables: x)" in result.stderr, result.stderr
