"""What the tests keep once per machine (OMNI_TEST_HOME: the default models, the agent CLIs),
made by one test process at a time: parallel workers (pytest -n) share the folder."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def test_home() -> Path:
    return Path(os.environ.get("OMNI_TEST_HOME", Path.home() / ".cache" / "omni-test"))


@contextmanager
def alone() -> Iterator[Path]:
    """OMNI_TEST_HOME, held by this process until the block ends (a fetch half done by
    another worker is waited for, never seen)."""
    home = test_home()
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield home
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
