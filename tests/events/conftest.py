"""Fixtures for the event log: a real, migrated SQLite file per test."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from omni.db import upgrade
from omni.events import Appender, EventStore, Notifier


def _aiosqlite_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("(_connection_worker_thread)")]


@pytest.fixture(autouse=True)
async def _settle_aiosqlite_threads():
    """Let aiosqlite worker threads finish while this test's loop is still open.

    A connection that fails to open is stopped fire-and-forget; if the loop closes first,
    the worker thread dies with "Event loop is closed" and pytest blames a later test.
    """
    yield
    deadline = time.monotonic() + 2.0
    while _aiosqlite_threads() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "omni.db"
    upgrade(str(path))
    return path


@pytest.fixture
async def store(db_path: Path):
    s = EventStore(str(db_path))
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def notifier() -> Notifier:
    return Notifier()


@pytest.fixture
async def appender(store: EventStore, notifier: Notifier):
    a = Appender(store, notifier)
    a.start()
    try:
        yield a
    finally:
        await a.stop()
