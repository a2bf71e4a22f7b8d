"""Many models on one server, through the OpenAI SDK: the catalogue listed, two models
answering at once, an alias, a model unloaded for room and loaded again, a model that fails
to load, and a kill -9 during a background response of the second model, continued on it."""

from __future__ import annotations

import concurrent.futures
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import APIStatusError, OpenAI

from omni.api.app import Settings
from omni.errors import ModelLoadError
from omni.runtime.loading.catalogue import scan
from omni.runtime.loading.loader import Loader
from omni.service.models import Models
from omni.testing.llama import build_tiny_adapter, build_tiny_llama
from tests.server import ServerThread
from tests.test_cli import kill_mid_stream, serving


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --models-dir: two tiny llamas of different weights, and a folder that is no model
    mlx-lm can load."""
    root = tmp_path_factory.mktemp("shelf")
    build_tiny_llama(root / "tiny-a", seed=1)
    build_tiny_llama(root / "nested" / "tiny-b", seed=2)
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "architectures": ["X"]}')
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    shutil.copytree(root / "tiny-a", root / "bad-weights")  # a tokenizer, but no weights
    (root / "bad-weights" / "model.safetensors").write_bytes(b"\0" * 64)
    return root


def sdk(base: str) -> OpenAI:
    return OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0,
                  _strict_response_validation=True)  # fmt: skip


def wait(client: OpenAI, rid: str) -> Any:
    deadline = time.monotonic() + 120
    while (got := client.responses.retrieve(rid)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"{rid} did not end"
        time.sleep(0.1)
    return got


def listed(client: OpenAI) -> dict[str, bool]:
    return {m.id: getattr(m, "loaded") for m in client.models.list().data}  # noqa: B009


@pytest.fixture
def pool_server(shelf: Path, tmp_path: Path) -> Iterator[ServerThread]:
    """One loaded at a time: every switch unloads the other."""
    home = tmp_path / "home"
    entries = scan(home, [shelf])
    models = Models(entries, Loader(home), default="tiny-a", aliases={"gpt-5.5": "tiny-b"},
                    max_loaded=1)  # fmt: skip
    default = Loader(home)(models.find("tiny-a"))
    default.wait_loaded()
    models.adopt(default)
    srv = ServerThread(Settings(db_path=str(tmp_path / "omni.db")), models).start()
    yield srv
    srv.stop()


def test_the_catalogue_an_alias_and_a_model_unloaded_then_loaded_again(
    pool_server: ServerThread,
) -> None:
    client = sdk(pool_server.base_url)
    assert listed(client) == {
        "tiny-a": True, "tiny-b": False, "broken": False, "bad-weights": False,
        "smollm2-135m-instruct": False, "all-minilm-l6-v2": False, "whisper-tiny.en": False,
    }  # fmt: skip
    one = client.models.retrieve("gpt-5.5")
    assert one.id == "tiny-b" and getattr(one, "kind") == "chat"  # noqa: B009
    with pytest.raises(APIStatusError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.status_code == 404

    def greedy(model: str) -> Any:
        return client.responses.create(model=model, input="Once", max_output_tokens=8,
                                       temperature=0)  # fmt: skip

    first = greedy("tiny-a")
    via_alias = greedy("gpt-5.5")  # loads tiny-b: tiny-a goes to make room
    assert (first.model, via_alias.model) == ("tiny-a", "tiny-b")
    assert listed(client)["tiny-a"] is False and listed(client)["tiny-b"] is True
    again = greedy("tiny-a")  # loaded again, the same weights: the same greedy text
    assert again.model == "tiny-a" and again.output_text == first.output_text
    assert listed(client)["tiny-a"] is True and listed(client)["tiny-b"] is False


def test_adapters_loaded_with_a_model_answer_as_a_model_of_their_own(
    pool_server: ServerThread, shelf: Path, tmp_path: Path
) -> None:
    lora = build_tiny_adapter(shelf / "tiny-a", tmp_path / "lora-a")
    client = sdk(pool_server.base_url)
    ask = {"model": "tiny-a", "input": "Once", "max_output_tokens": 8, "temperature": 0}
    plain = client.responses.create(**ask)
    tuned = client.responses.create(**ask, extra_body={"adapter_path": str(lora)})
    assert tuned.model.startswith("tiny-a+lora-a-") and tuned.model in listed(client)
    assert tuned.output_text != plain.output_text  # the adapters change what it writes
    chat = client.chat.completions.create(
        model="tiny-a", messages=[{"role": "user", "content": "x"}], max_tokens=3,
        extra_body={"adapter_path": str(lora)},
    )  # fmt: skip
    assert chat.model == tuned.model
    with pytest.raises(APIStatusError) as bad:
        client.responses.create(model="tiny-a", input="x",
                                extra_body={"adapter_path": str(tmp_path)})  # fmt: skip
    assert bad.value.status_code == 400
    assert bad.value.response.json()["error"]["param"] == "adapter_path"


def test_a_draft_model_decodes_speculatively_to_the_same_greedy_text(
    pool_server: ServerThread,
) -> None:
    client = sdk(pool_server.base_url)
    ask = {"model": "tiny-a", "input": "Once upon", "max_output_tokens": 24, "temperature": 0}
    plain = client.responses.create(**ask)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # decoded one after the other
        drafted = list(pool.map(
            lambda _: client.responses.create(**ask, extra_body={"draft_model": "tiny-b"}),
            range(2),
        ))  # fmt: skip
    for answer in drafted:
        assert answer.model == "tiny-a~tiny-b" and answer.status == plain.status
        assert answer.output_text == plain.output_text  # exact: the model verifies each draft
        assert answer.usage.output_tokens == plain.usage.output_tokens
    with pytest.raises(APIStatusError) as unknown:
        client.responses.create(**ask, extra_body={"draft_model": "no-such-model"})
    assert unknown.value.status_code == 404
    assert unknown.value.response.json()["error"]["param"] == "draft_model"


def test_a_model_that_fails_to_load_is_that_requests_error(pool_server: ServerThread) -> None:
    client = sdk(pool_server.base_url)
    with pytest.raises(APIStatusError) as failed:
        client.chat.completions.create(model="broken", messages=[{"role": "user", "content": "x"}])
    assert failed.value.status_code == 500
    body = failed.value.response.json()["error"]
    assert body["code"] == "model_load_error"
    assert body["message"] == ModelLoadError.of("broken").message  # why is the log's
    assert body["param"] is None and body["type"]
    ok = client.chat.completions.create(
        model="tiny-a", messages=[{"role": "user", "content": "x"}], max_tokens=3
    )
    assert ok.model == "tiny-a" and ok.choices[0].finish_reason in ("length", "stop")
    # The tokenizer loads, the weights do not: a background request is taken in at once,
    # queued while they load, and ends failed saying why; the next request tries again.
    for _ in range(2):
        queued = client.responses.create(model="bad-weights", input="x", background=True)
        assert queued.status == "queued" and queued.model == "bad-weights"
        final = wait(client, queued.id)
        assert final.status == "failed" and final.error is not None
        assert final.error.message == ModelLoadError.of("bad-weights").message
    assert client.responses.create(model="tiny-a", input="x", max_output_tokens=2).model == "tiny-a"
    with pytest.raises(APIStatusError) as wrong_kind:
        client.responses.create(model="all-minilm-l6-v2", input="x")
    assert wrong_kind.value.status_code == 400
    assert "embedding model" in wrong_kind.value.response.json()["error"]["message"]


def test_two_models_at_once_and_a_kill_9_during_the_seconds_background_run(
    shelf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_HOME", str(tmp_path / "home"))
    db = tmp_path / "omni.db"
    flags = ("--models-dir", str(shelf), "--alias", "gpt-5.5=tiny-b", "--no-hf-cache")
    body = {"model": "gpt-5.5", "input": "Tell me a long story.", "temperature": 0,
            "max_output_tokens": 400}  # fmt: skip
    with serving(shelf / "tiny-a", db, "warning", None, *flags) as (base, proc):
        client = sdk(base)
        assert listed(client)["tiny-a"] and not listed(client)["tiny-b"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            chat = pool.submit(
                client.chat.completions.create, model="tiny-a", max_tokens=20,
                messages=[{"role": "user", "content": "Hi"}],
            )  # fmt: skip
            resp = pool.submit(client.responses.create, model="gpt-5.5", input="Hi",
                               max_output_tokens=20)  # fmt: skip
            assert (chat.result().model, resp.result().model) == ("tiny-a", "tiny-b")
        assert listed(client)["tiny-a"] and listed(client)["tiny-b"]
        rid = httpx.post(f"{base}/v1/responses", json={**body, "background": True}).json()["id"]
        kill_mid_stream(base, rid, proc, 40)
    with serving(shelf / "tiny-a", db, "warning", None, *flags) as (base, _):
        client = sdk(base)
        deadline = time.monotonic() + 300
        while (final := client.responses.retrieve(rid)).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        reference = client.responses.create(**body)  # uninterrupted, on the same model
    assert final.model == "tiny-b" and final.status == reference.status
    assert final.output_text == reference.output_text  # continued token-exactly, on tiny-b
