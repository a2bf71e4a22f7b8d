"""The real default model (SmolLM2-135M-Instruct) behind a real server and the real SDK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from omni.api.app import Settings
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.default_model import DEFAULT_MODEL_ID
from omni.runtime.loading.source import ModelSource
from tests.server import ServerThread

pytestmark = pytest.mark.smollm

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm_server(
    smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    engine = MLXEngine(ModelSource(str(smollm_dir), DEFAULT_MODEL_ID))
    engine.start()
    db_path = tmp_path_factory.mktemp("smollm") / "omni.db"
    srv = ServerThread(Settings(db_path=str(db_path)), engine).start()
    yield srv
    srv.stop()
    engine.close()


@pytest.fixture
def sdk(smollm_server: ServerThread):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    with OpenAI(
        base_url=f"{smollm_server.base_url}/v1",
        api_key="test",
        max_retries=0,
        _strict_response_validation=True,
    ) as c:
        yield c


def test_paris(sdk) -> None:
    r = sdk.responses.create(
        model=DEFAULT_MODEL_ID, input=QUESTION, temperature=0, max_output_tokens=12
    )
    assert r.output_text.startswith("The capital of France is Paris")
    assert r.usage.input_tokens > 10
    assert sdk.responses.retrieve(r.id).output_text == r.output_text


def test_paris_streamed_then_chained(sdk) -> None:
    with sdk.responses.stream(
        model=DEFAULT_MODEL_ID, input=QUESTION, temperature=0, max_output_tokens=40
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert "Paris" in final.output_text
    follow_up = sdk.responses.create(
        model=DEFAULT_MODEL_ID,
        previous_response_id=final.id,
        input="And what is the capital of Germany?",
        temperature=0,
        max_output_tokens=16,
    )
    assert follow_up.usage.input_tokens > final.usage.input_tokens + final.usage.output_tokens
    assert "Berlin" in follow_up.output_text
