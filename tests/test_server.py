"""The composition root (omni/server.py) opens the log and every modality's service, recovers
them in one loop and closes them in reverse (which kinds they are: tests/test_modalities.py)."""

from __future__ import annotations

from pathlib import Path

from omni.server import build
from omni.service.modality import ModelRequests
from omni.settings import ServerSettings
from tests.service.conftest import ScriptedEngine


async def test_a_server_opens_recovers_and_closes_every_modality(tmp_path: Path) -> None:
    server = await build(ServerSettings(db_path=str(tmp_path / "omni.db")), ScriptedEngine())
    try:
        for modality in server.modalities:
            assert await modality.recover() == 0  # an empty log: nothing to take up
            if isinstance(modality, ModelRequests):  # says what a crash leaves of it
                assert modality.left_open.opened
        assert not server.lifecycle.closing
    finally:
        await server.close()
