"""The model pool: models loaded on demand within a memory budget (and a count cap, where one
is set), the least recently used free one unloaded to make room, never one in use; aliases; a
load that fails."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import pytest

from omni.catalogue import GB, ModelEntry
from omni.errors import InvalidRequest, ModelLoadError, ModelNotFound
from omni.ports.chat import Capabilities
from omni.service.models import LOAD_MS, Models


class Loaded:
    capabilities = Capabilities(context_length=64)
    on_step = None
    memory_bytes: int | None = None  # what its weights take, where it reports that
    loading, load_error = False, None  # loaded once returned

    def __init__(self, model_id: str, log: list[str], path: str) -> None:
        self.model_id, self.log = model_id, log
        self.path = path  # the folder it was loaded from
        self.queued = self.running = 0
        log.append(f"load {model_id}")

    def close(self) -> None:
        self.log.append(f"unload {self.model_id}")


ENTRIES = [
    ModelEntry("a", "chat", "/m/a", "models-dir", 2 * GB),
    ModelEntry("b", "chat", "/m/b", "models-dir", 2 * GB),
    ModelEntry("c", "chat", "/m/c", "models-dir", 2 * GB),
    ModelEntry("e", "embedding", "/m/e", "models-dir", 90 << 20),
    ModelEntry("s", "speech", "/m/s", "models-dir", 330 << 20),
    ModelEntry("w", "transcription", "/m/w", "default"),  # not fetched yet: size unknown
]


def pool(log: list[str], entries: list[ModelEntry] = ENTRIES, **kw: object) -> Models:
    broken = kw.pop("broken", False)
    measured = cast(dict[str, int], kw.pop("measured", {}))
    fetched = cast(dict[str, Path], kw.pop("fetched", {}))  # a default's folder, once fetched

    def load(entry: ModelEntry) -> Loaded:
        if entry.id == "c" and broken:
            raise ValueError("no weights in /m/c")
        model = Loaded(entry.id, log, str(fetched.get(entry.id, entry.path)))
        model.memory_bytes = measured.get(entry.id)
        return model

    return Models(entries, load, default="a", default_embedding="e", **kw)  # type: ignore[arg-type]


async def test_models_load_on_demand_and_the_least_recently_used_free_one_goes() -> None:
    log: list[str] = []
    models = pool(log, aliases={"gpt-5.5": "b"}, max_loaded=2)  # the count cap, where set
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


async def test_a_chat_model_stays_loaded_while_an_embedder_and_a_speech_model_load() -> None:
    log: list[str] = []
    models = pool(log, memory_budget=8 * GB)  # no count cap: memory is the bound
    await models.engine("a")
    async with models.use_embedder(None):
        pass
    async with models.use_speaker("s"):
        pass
    async with models.use_transcriber("w"):  # of unknown size: it counts as nothing
        pass
    await models.engine("a")
    assert log == ["load a", "load e", "load s", "load w"]
    assert all(models.is_loaded(i) for i in "aesw")


async def test_a_model_too_big_for_what_is_left_evicts_the_least_recently_used_idle_one() -> None:
    log: list[str] = []
    big = [*ENTRIES, ModelEntry("d", "chat", "/m/d", "models-dir", 2 * GB)]
    models = pool(log, big, memory_budget=7 * GB)
    a = await models.engine("a")
    await models.engine("b")
    await models.engine("c")
    async with models.use_embedder(None):  # 6.1 of 7 GB: it fits
        pass
    a.running = 1  # type: ignore[misc]  # a job decodes on a, the least recently used
    await models.engine("c")
    await models.engine("d")  # 8.1 of 7: b, the least recently used idle one, goes
    assert log == ["load a", "load b", "load c", "load e", "unload b", "load d"]
    assert [models.is_loaded(i) for i in "abcde"] == [True, False, True, True, True]


async def test_a_loaded_model_counts_what_it_reports_not_its_size_on_disk() -> None:
    log: list[str] = []
    # a's weights unpacked to float32 take 5 GB in memory, not the 2 GB it has on disk.
    models = pool(log, memory_budget=6 * GB, measured={"a": 5 * GB})
    await models.engine("a")
    await models.engine("b")  # 5 + 2 > 6: a goes
    assert log == ["load a", "unload a", "load b"]


async def test_a_model_of_unknown_size_counts_its_folder_once_it_is_loaded(tmp_path: Path) -> None:
    log: list[str] = []
    folder = tmp_path / "whisper"  # w, a default not fetched before: fetched as it loads
    folder.mkdir()
    with (folder / "model.bin").open("wb") as weights:
        weights.truncate(3 * GB)  # sparse: 3 GB on disk by its size, nothing written
    models = pool(log, memory_budget=6 * GB, fetched={"w": folder})
    async with models.use_transcriber("w"):
        pass
    await models.engine("a")
    await models.engine("b")  # 3 + 2 + 2 > 6: w, the least recently used, goes
    assert log == ["load w", "load a", "unload w", "load b"]


async def test_a_model_larger_than_the_budget_loads_once_it_is_alone() -> None:
    log: list[str] = []
    models = pool(log, memory_budget=1 * GB)
    async with models.use_embedder(None):
        pass
    await models.engine("a")  # 2 GB: larger than the whole budget, it still loads alone
    assert log == ["load e", "unload e", "load a"]


async def test_the_count_cap_still_bounds_models_of_any_size() -> None:
    log: list[str] = []
    models = pool(log, memory_budget=64 * GB, max_loaded=2)
    await models.engine("a")
    async with models.use_embedder(None):
        pass
    async with models.use_speaker("s"):  # 3 models: the cap of 2, well within memory
        pass
    assert log == ["load a", "load e", "unload a", "load s"]


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


async def test_a_request_knows_how_long_it_waited_for_its_models_load() -> None:
    log: list[str] = []
    models = pool(log)
    took = Loaded.__init__

    def slow(self: Loaded, model_id: str, log: list[str], path: str) -> None:
        time.sleep(0.05)  # what loading weights takes
        took(self, model_id, log, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Loaded, "__init__", slow)
        async with models.use("a"):
            assert LOAD_MS.get() >= 50
        async with models.use("a"):  # loaded now: nothing to wait for
            assert LOAD_MS.get() == 0
    await models.close()
