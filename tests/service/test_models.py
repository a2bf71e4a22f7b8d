"""The model pool: models loaded on demand, at most max_loaded at once, the least recently
used free one unloaded to make room, never one in use; aliases; a load that fails."""

from __future__ import annotations

import asyncio

import pytest

from omni.catalogue import ModelEntry
from omni.errors import InvalidRequest, ModelLoadError, ModelNotFound
from omni.jobs import Capabilities
from omni.service.models import Models


class Loaded:
    capabilities = Capabilities(context_length=64)
    on_step = None

    def __init__(self, model_id: str, log: list[str]) -> None:
        self.model_id, self.log = model_id, log
        self.queued = self.running = 0
        log.append(f"load {model_id}")

    def close(self) -> None:
        self.log.append(f"unload {self.model_id}")


ENTRIES = [
    ModelEntry("a", "chat", "/m/a", "models-dir"),
    ModelEntry("b", "chat", "/m/b", "models-dir"),
    ModelEntry("c", "chat", "/m/c", "models-dir"),
    ModelEntry("e", "embedding", "/m/e", "models-dir"),
]


def pool(log: list[str], **kw: object) -> Models:
    broken = kw.pop("broken", False)

    def load(entry: ModelEntry) -> Loaded:
        if entry.id == "c" and broken:
            raise ValueError("no weights in /m/c")
        return Loaded(entry.id, log)

    return Models(ENTRIES, load, default="a", default_embedding="e", **kw)  # type: ignore[arg-type]


async def test_models_load_on_demand_and_the_least_recently_used_free_one_goes() -> None:
    log: list[str] = []
    models = pool(log, aliases={"gpt-5.5": "b"})
    assert not any(models.is_loaded(e.id) for e in ENTRIES)
    async with models.use(None) as a:
        assert a.model_id == "a"
    async with models.use("gpt-5.5") as b:
        assert b.model_id == "b"
    async with models.use("a"):
        pass  # a is now the more recently used
    async with models.use("c"):
        pass
    assert log == ["load a", "load b", "unload b", "load c"]
    assert [models.is_loaded(i) for i in "abc"] == [True, False, True]
    await models.close()
    assert sorted(log[-2:]) == ["unload a", "unload c"]


async def test_a_model_in_use_is_never_unloaded_the_request_waits() -> None:
    log: list[str] = []
    models = pool(log, max_loaded=1)
    async with models.use("a") as a:
        a.running = 1  # type: ignore[misc]  # a job decodes on it
        waiting = asyncio.create_task(models.engine("b"))
        await asyncio.sleep(0.2)
        assert not waiting.done() and log == ["load a"]
        a.running = 0  # type: ignore[misc]
    b = await asyncio.wait_for(waiting, 10)
    assert b.model_id == "b" and log == ["load a", "unload a", "load b"]


async def test_requests_for_a_loading_model_share_its_one_load() -> None:
    log: list[str] = []
    models = pool(log)
    got = await asyncio.gather(*(models.engine("b") for _ in range(5)))
    assert {id(e) for e in got} == {id(got[0])} and log == ["load b"]


async def test_names_kinds_and_a_failed_load(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    models = pool(log, broken=True)
    with pytest.raises(ModelNotFound) as missing:
        models.find("nope")
    assert missing.value.param == "model" and missing.value.status == 404
    with pytest.raises(InvalidRequest, match="embedding model"):
        models.find("e", "chat")
    with pytest.raises(InvalidRequest, match="chat model"):
        models.find("a", "embedding")
    assert models.find(None, "embedding").id == "e"
    with pytest.raises(ModelLoadError, match="^The model 'c' could not be loaded"):
        await models.engine("c")
    assert "no weights" in caplog.text  # why, for the operator
    assert not models.is_loaded("c")
    assert (await models.engine("b")).model_id == "b"  # the others are not disturbed


async def test_an_idle_model_is_unloaded_after_its_ttl() -> None:
    log: list[str] = []
    models = pool(log, idle_ttl=0.2)
    models.start()
    await models.engine("a")
    # The slot lets go of the model first, then closes it on a thread: wait for the close.
    for _ in range(200):
        if "unload a" in log:
            break
        await asyncio.sleep(0.05)
    assert not models.is_loaded("a")
    assert log == ["load a", "unload a"]
    assert (await models.engine("a")).model_id == "a"  # and loads again when asked
    await models.close()


def test_an_alias_must_name_a_model_of_the_catalogue() -> None:
    with pytest.raises(Exception, match="no model 'zz'"):
        pool([], aliases={"x": "zz"})
