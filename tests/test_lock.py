"""omni.lock: one holder per database, a pid for the refusal, nothing left once released."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from omni.errors import DatabaseInUse
from omni.lock import DatabaseLock


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    db = str(tmp_path / "omni.db")
    first = DatabaseLock.acquire(db)
    assert (tmp_path / "omni.db.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DatabaseInUse) as refused:
        DatabaseLock.acquire(db)  # flock: a second open file conflicts, in one process too
    assert f"(pid {os.getpid()})" in refused.value.message
    first.release()
    assert not (tmp_path / "omni.db.lock").exists()
    DatabaseLock.acquire(db).release()


def test_a_file_left_by_a_dead_holder_does_not_block(tmp_path: Path) -> None:
    (tmp_path / "omni.db.lock").write_text("999999999\n")  # kill -9 leaves the file, not the lock
    lock = DatabaseLock.acquire(str(tmp_path / "omni.db"))
    assert (tmp_path / "omni.db.lock").read_text() == f"{os.getpid()}\n"
    lock.release()
    lock.release()  # twice is harmless


def test_locks_on_other_databases_are_independent(tmp_path: Path) -> None:
    a = DatabaseLock.acquire(str(tmp_path / "a.db"))
    b = DatabaseLock.acquire(str(tmp_path / "b.db"))
    a.release()
    b.release()


def test_a_file_removed_before_it_was_locked_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that stops unlinks the file, then unlocks: whoever opened it just before then
    locks a file nobody else will open, and must take the one at the path instead."""
    lock_path = tmp_path / "omni.db.lock"
    lock_path.write_text("")
    orphan = os.open(lock_path, os.O_RDWR)
    lock_path.unlink()
    real_open, opened = os.open, []

    def open_orphan_first(path: object, flags: int, mode: int = 0o777) -> int:
        opened.append(path)
        return orphan if len(opened) == 1 else real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_orphan_first)
    lock = DatabaseLock.acquire(str(tmp_path / "omni.db"))
    monkeypatch.undo()
    assert len(opened) == 2
    assert lock_path.read_text() == f"{os.getpid()}\n"
    with pytest.raises(DatabaseInUse):
        DatabaseLock.acquire(str(tmp_path / "omni.db"))
    lock.release()
