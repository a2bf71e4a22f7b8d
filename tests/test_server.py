"""The composition root (omni/server.py): every kind of object the log records is one
modality's, registered once; the server opens, recovers and closes them all."""

from __future__ import annotations

from pathlib import Path

from omni.server import build
from omni.service.modality import Modality, ModelRequests
from omni.settings import ServerSettings
from omni.vocabulary import ID_PREFIXES
from tests.service.conftest import ScriptedEngine


async def test_every_kind_is_one_registered_modality(tmp_path: Path) -> None:
    server = await build(ServerSettings(db_path=str(tmp_path / "omni.db")), ScriptedEngine())
    try:
        modalities: tuple[Modality, ...] = server.modalities
        kinds = [kind for modality in modalities for kind in modality.kinds]
        assert sorted(kinds) == sorted(ID_PREFIXES)  # each once: none missing, none twice
        for modality in modalities:  # a model-process modality says what a crash leaves
            if isinstance(modality, ModelRequests):
                assert modality.left_open.opened
        assert await server.modalities[0].recover() == 0  # an empty log: nothing to take up
    finally:
        await server.close()
