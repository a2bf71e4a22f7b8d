"""The durability settings: WAL always; synchronous NORMAL by default, FULL on request."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni.cli.program import parser
from omni.db import upgrade
from omni.events import EventStore


@pytest.mark.parametrize("setting", ["NORMAL", "FULL"])
async def test_store_applies_the_synchronous_setting(tmp_path: Path, setting: str) -> None:
    path = str(tmp_path / "omni.db")
    upgrade(path)
    store = EventStore(path, synchronous=setting)
    await store.open()
    try:
        pragmas = await store.pragmas()
        assert (pragmas["journal_mode"], pragmas["synchronous"]) == ("wal", setting)
    finally:
        await store.close()


def test_serve_defaults_to_normal_and_takes_full(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parser().parse_args(["serve"]).synchronous == "NORMAL"
    assert parser().parse_args(["serve", "--synchronous", "FULL"]).synchronous == "FULL"
    monkeypatch.setenv("OMNI_SYNCHRONOUS", "full")
    assert parser().parse_args(["serve"]).synchronous == "FULL"
