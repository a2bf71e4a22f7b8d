"""`omni serve`, `omni db upgrade` and `omni db check` on a file that is not theirs to write:
not SQLite, another program's database, a newer schema, a damaged log. One line each, exit
status 2, and the file byte for byte as it was (no -wal or -shm beside it either)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from omni.db import alembic_config
from tests.server import free_port


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log made by `omni db upgrade`, once: each test that needs one gets a copy."""
    path = tmp_path_factory.mktemp("upgraded") / "omni.db"
    assert omni("db", "upgrade", "--db", str(path)).returncode == 0
    return path


def omni_log(path: Path, upgraded: Path, events: int = 0) -> Path:
    """A log made by `omni db upgrade` (a copy of `upgraded`), with `events` rows of ~500
    bytes (some pages)."""
    for name in (upgraded.name, f"{upgraded.name}-wal"):
        if (upgraded.parent / name).exists():
            shutil.copyfile(
                upgraded.parent / name, path.parent / name.replace(upgraded.name, path.name)
            )
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO events (stream_id, seq, type, data, created_at) VALUES (?, 0, ?, ?, 0)",
            [(f"resp_{i}", "response.created", "x" * 500) for i in range(events)],
        )
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def newer(path: Path, upgraded: Path) -> str:
    omni_log(path, upgraded)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    head = ScriptDirectory.from_config(alembic_config(str(path))).get_current_head()
    return f"has schema version 0099, newer than this Omni (knows up to {head}); upgrade Omni"


def damaged(path: Path, upgraded: Path) -> str:
    """A page in the middle of a real log overwritten (SQLite's header stays sound)."""
    omni_log(path, upgraded, events=300)
    pages = path.stat().st_size // 4096
    with path.open("r+b") as file:
        file.seek(pages // 2 * 4096)
        file.write(b"\xa5" * 4096)
    return "is damaged (Page "


def not_sqlite(path: Path, upgraded: Path) -> str:
    path.write_bytes(b"name,value\n" * 500)
    return "is not an SQLite database"


def foreign(path: Path, upgraded: Path) -> str:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    return "is not an Omni log (its tables: users)"


FILES: dict[str, Callable[[Path, Path], str]] = {
    "newer": newer,
    "damaged": damaged,
    "not_sqlite": not_sqlite,
    "foreign": foreign,
}


@pytest.fixture(params=sorted(FILES))
def refused(
    request: pytest.FixtureRequest, tmp_path: Path, upgraded: Path
) -> tuple[Path, str, bytes]:
    db = tmp_path / "omni.db"
    fragment = FILES[request.param](db, upgraded)
    return db, fragment, db.read_bytes()


def test_serve_refuses_it_in_one_line_and_writes_nothing(
    refused: tuple[Path, str, bytes], tmp_path: Path
) -> None:
    db, fragment, before = refused
    mtime = db.stat().st_mtime_ns
    # No model is loaded before the database is read: a missing one would be the error.
    result = omni(
        "serve", "--db", str(db), "--model", str(tmp_path / "none"), "--port", str(free_port())
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"omni: error: {db} ") and fragment in result.stderr
    assert db.read_bytes() == before and db.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(tmp_path)) == ["omni.db"]  # no -wal, -shm or lock file left


@pytest.mark.parametrize("command", ["upgrade", "check"])
def test_db_commands_refuse_it_in_one_line(
    refused: tuple[Path, str, bytes], tmp_path: Path, command: str
) -> None:
    db, fragment, before = refused
    result = omni("db", command, "--db", str(db))
    assert "Traceback" not in result.stderr, result.stderr
    if command == "check" and "damaged" in fragment:
        # check's own job: it lists what SQLite found, then a summary (no error line).
        assert result.returncode == 1 and result.stdout.endswith("problems\n"), result.stdout
    else:
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
    assert db.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["omni.db"]


def test_an_omni_log_of_this_schema_still_starts(tmp_path: Path, upgraded: Path) -> None:
    """The inspection reads a sound log, its WAL included (as a crash leaves it), and the
    upgrade goes on."""
    db = omni_log(tmp_path / "omni.db", upgraded, events=10)
    with closing(sqlite3.connect(db)) as writer:  # open: its WAL stays beside the file
        writer.execute("PRAGMA wal_autocheckpoint=0")
        with writer:
            writer.execute(
                "INSERT INTO events (stream_id, seq, type, data, created_at)"
                " VALUES ('resp_wal', 0, 'response.created', '{}', 0)"
            )
        assert Path(f"{db}-wal").stat().st_size > 0
        result = omni("db", "upgrade", "--db", str(db))
        assert result.returncode == 0, result.stderr
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (11,)
