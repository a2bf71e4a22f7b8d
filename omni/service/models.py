"""The models a server serves: its catalogue, and the ones loaded now, each in an engine of
its own. A request names a model (an id or an alias); the first request for one loads it.
The loaded ones stay within a memory budget and, where one is set, a count cap
(omni.service.budget): to load one more, the least recently used one that nobody is using (no
job queued or running, no request being taken in) is unloaded while a bound would be passed,
and one idle longer than `idle_ttl` is unloaded by itself. A request that needs room while
every loaded model is busy waits for one to become free; one larger than the budget loads alone."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from omni.catalogue import ModelEntry, ModelKind
from omni.errors import InvalidRequest, ModelLoadError, ModelNotFound, OmniError
from omni.ports.chat import Engine
from omni.ports.embeddings import Embedder
from omni.ports.images import Imager
from omni.ports.model import Model
from omni.ports.speech import Speaker
from omni.ports.transcription import Transcriber
from omni.service.budget import Budget, footprint, on_disk
from omni.service.variants import adapted, drafted

log = logging.getLogger(__name__)

# How long the request in this task waited for its model to load (0: it was loaded), set as it
# gets the model; its service records it beside the request (`load_ms`).
LOAD_MS: ContextVar[int] = ContextVar("load_ms", default=0)

Loader = Callable[[ModelEntry], Model]  # blocking: run in a thread
Using = AbstractAsyncContextManager  # a model held for one request (async with)
WAIT_S = 0.05  # how often a request waiting for room looks again
# What a model of each kind is called in a refusal, and where it is used instead.
_A = {"chat": "a chat", "embedding": "an embedding", "speech": "a speech",
      "transcription": "a transcription", "image": "an image generation"}  # fmt: skip
_USE = {"chat": "chat, completions or responses", "embedding": "/v1/embeddings",
        "speech": "/v1/audio/speech",
        "transcription": "/v1/audio/transcriptions or /v1/audio/translations",
        "image": "/v1/images/generations"}  # fmt: skip


@dataclass(eq=False)
class _Slot:
    entry: ModelEntry
    model: Model | None = None
    loading: asyncio.Task[Model] | None = None
    users: int = 0  # requests being taken in on it
    used_at: float = field(default_factory=time.monotonic)
    loaded_at: float | None = None  # time.time() once loaded
    owned: bool = True  # the pool loaded it, and closes it (not one it was handed)
    stored: int | None = None  # bytes of the folder it was loaded from, measured after its load

    def busy(self) -> bool:
        model = self.model
        if self.users or self.loading is not None or model is None:
            return True
        return model.loading or bool(model.running or model.queued)

    def footprint(self) -> int:
        return footprint(self.model, self.stored, self.entry.size_bytes)


class Models:
    def __init__(
        self,
        catalogue: Iterable[ModelEntry],
        load: Loader,
        *,
        default: str,
        default_embedding: str | None = None,
        default_transcription: str | None = None,
        aliases: Mapping[str, str] | None = None,
        max_loaded: int | None = None,
        memory_budget: int | None = None,
        idle_ttl: float | None = None,
    ):
        self._slots: dict[str, _Slot] = {}
        for entry in catalogue:
            if entry.id in self._slots:
                log.warning("two models have the id %r: serving %s", entry.id, entry.path)
                continue
            self._slots[entry.id] = _Slot(entry)
        self._load = load
        self.default, self.default_embedding = default, default_embedding
        self.default_transcription = default_transcription
        self.aliases = dict(aliases or {})
        for name, target in self.aliases.items():
            if target not in self._slots:
                raise OmniError(f"alias {name}={target}: no model {target!r} in the catalogue")
        if default not in self._slots:
            raise OmniError(f"the default model {default!r} is not in the catalogue")
        self.budget = Budget(memory_budget, None if max_loaded is None else max(1, max_loaded))
        self.idle_ttl = idle_ttl
        # Told of every chat model loaded (the app hooks /metrics to its steps).
        self.on_engine: Callable[[Engine], None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self.started = time.time()

    @classmethod
    def single(cls, engine: Engine, *aliases: str) -> Models:
        """One model, loaded already, and nothing else to load (tests, benchmarks)."""
        entry = ModelEntry(engine.model_id, "chat", "", "named")

        def cannot(entry: ModelEntry) -> Model:
            raise ModelLoadError(f"{entry.id} cannot be loaded again here")

        models = cls([entry], cannot, default=engine.model_id)
        models.aliases = {a: engine.model_id for a in aliases if a and a != engine.model_id}
        slot = models._slots[engine.model_id]
        slot.model, slot.loaded_at, slot.owned = engine, time.time(), False
        return models

    def adopt(self, model: Model) -> None:
        """A model loaded before serving (the default, at start), closed by the pool."""
        slot = self._slots[model.model_id]
        slot.model, slot.loaded_at = model, time.time()

    # --- the catalogue ----------------------------------------------------------------

    def entries(self) -> list[ModelEntry]:
        return [slot.entry for slot in self._slots.values()]

    def is_loaded(self, model_id: str) -> bool:
        slot = self._slots.get(model_id)
        return slot is not None and slot.model is not None

    def loaded_at(self, model_id: str) -> float | None:
        slot = self._slots.get(model_id)
        return None if slot is None else slot.loaded_at

    def loaded(self) -> list[Model]:
        return [s.model for s in self._slots.values() if s.model is not None]

    def engines(self) -> list[Engine]:
        """The loaded chat models' engines."""
        return [
            cast(Engine, s.model)
            for s in self._slots.values()
            if s.model is not None and s.entry.kind == "chat"
        ]

    def find(self, name: str | None, kind: ModelKind | None = None) -> ModelEntry:
        """The entry `name` (an id or an alias; None: the default of `kind`) stands for, else
        404. With `kind`, a model of the other kind is a 400 saying so."""
        if name is None and kind == "image":  # the one image model, where there is one
            drawers = [s.entry.id for s in self._slots.values() if s.entry.kind == "image"]
            if len(drawers) != 1:
                served = f"this server serves {len(drawers)}" if drawers else "none is served"
                raise InvalidRequest(f"`model` is required: name an image model ({served}).",
                                     param="model")  # fmt: skip
            name = drawers[0]
        if name is None:
            defaults = {"embedding": self.default_embedding,
                        "transcription": self.default_transcription}  # fmt: skip
            name = defaults.get(kind or "chat", self.default)
            if name is None:
                raise InvalidRequest(f"`model` is required: no default {kind} model is served.",
                                     param="model")  # fmt: skip
        slot = self._slots.get(self.aliases.get(name, name))
        if slot is None:
            raise ModelNotFound(
                f"The model '{name}' does not exist or is not served here "
                "(GET /v1/models lists the models this server serves).",
                param="model",
            )
        entry = slot.entry
        if kind is not None and entry.kind != kind:
            raise InvalidRequest(
                f"The model '{name}' is {_A[entry.kind]} model, not {_A[kind]} model: use it "
                f"with {_USE[entry.kind]}.",
                param="model",
            )
        return entry

    # --- using a model ----------------------------------------------------------------

    def with_adapter(self, name: str | None, adapter: str) -> str:
        """The id of chat model `name` with the LoRA adapters in folder `adapter` loaded on
        it: a model of its own (its engine, its prefix cache), added to the catalogue."""
        base = self.find(name, "chat")
        if base.adapter:  # adapters in place of the ones it has
            base = self.find(base.base, "chat")
        return self._added(adapted(base, adapter))

    def with_draft(self, name: str | None, draft: str) -> str:
        """The id of chat model `name` decoded speculatively with the draft model `draft` (a
        smaller model of the same vocabulary, named as a request names a model)."""
        model = self.find(name, "chat")
        try:
            helper = self.find(draft, "chat")
        except OmniError as exc:
            exc.param = "draft_model"
            raise
        return self._added(drafted(model, helper, draft))

    def _added(self, entry: ModelEntry) -> str:
        """A variant's id, its entry added to the catalogue the first time it is named."""
        if entry.id not in self._slots:
            self._slots[entry.id] = _Slot(entry)
        return entry.id

    def variant(self, entry: ModelEntry) -> dict[str, str] | None:
        """What an accepted request records of a model with adapters or a draft, so that a
        restart can load the same (variant_id() gives its id back)."""
        if not (entry.adapter or entry.draft):
            return None
        return {"model": entry.base, "adapter": entry.adapter, "draft": entry.draft}

    def variant_id(self, recorded: dict[str, str]) -> str:
        name = recorded["model"]
        if recorded.get("adapter"):
            name = self.with_adapter(name, recorded["adapter"])
        if recorded.get("draft"):
            name = self.with_draft(name, recorded["draft"])
        return name

    def use(
        self, name: str | None, adapter: str | None = None, draft: str | None = None
    ) -> Using[Engine]:
        """The chat model `name` stands for (with LoRA `adapter`s, decoded speculatively with
        `draft`), loaded, and kept loaded while the caller takes a request in on it (a job
        it submits keeps it loaded afterwards). _using's own context, not one around it: each
        request enters this one."""
        if adapter is not None:
            name = self.with_adapter(name, adapter)
        if draft is not None:
            name = self.with_draft(name, draft)
        return cast(Using[Engine], self._using(self.find(name, "chat")))

    # The other kinds' models, as `use` (the entry's kind says which port a model is).

    def use_embedder(self, name: str | None) -> Using[Embedder]:
        return cast(Using[Embedder], self._using(self.find(name, "embedding")))

    def use_speaker(self, name: str | None) -> Using[Speaker]:
        return cast(Using[Speaker], self._using(self.find(name, "speech")))

    def use_transcriber(self, name: str | None) -> Using[Transcriber]:
        return cast(Using[Transcriber], self._using(self.find(name, "transcription")))

    def use_imager(self, name: str | None) -> Using[Imager]:
        return cast(Using[Imager], self._using(self.find(name, "image")))

    async def engine(self, model_id: str) -> Engine:
        """The chat model `model_id` loaded, for a run that a restart continues."""
        async with self._using(self.find(model_id, "chat")) as model:
            return cast(Engine, model)

    @asynccontextmanager
    async def _using(self, entry: ModelEntry) -> AsyncIterator[Model]:
        slot = self._slots[entry.id]
        slot.users += 1
        try:
            began, ready = time.perf_counter(), slot.model is not None
            model = await self._ready(slot)
            # The request's own record says how long it waited for its model's load.
            LOAD_MS.set(0 if ready else round((time.perf_counter() - began) * 1000))
            slot.used_at = time.monotonic()
            yield model
        finally:
            slot.users -= 1
            slot.used_at = time.monotonic()

    async def _ready(self, slot: _Slot) -> Model:
        while True:
            if self._closed:
                raise ModelLoadError("the server is shutting down")
            if slot.model is not None and slot.model.load_error is not None:
                await self._unload(slot, f"{slot.model.load_error}: loading it again")
            if slot.model is not None:
                return slot.model
            if slot.loading is None:
                if not await self._room(slot):
                    await asyncio.sleep(WAIT_S)  # every loaded model is busy: wait for one
                    continue
                slot.loading = asyncio.create_task(self._start(slot), name=f"load-{slot.entry.id}")
            return await asyncio.shield(slot.loading)  # a request cancelled: the load goes on

    async def _room(self, slot: _Slot) -> bool:
        """Make room for `slot` to load: unload the least recently used free model while
        loading it would pass the memory budget or the count cap. False if none can go now."""
        taken = [s for s in self._slots.values() if s is not slot and (s.model or s.loading)]
        while self.budget.over(sizes := [s.footprint() for s in taken], slot.footprint()):
            free = [s for s in taken if not s.busy()]
            if not free:
                return False
            victim = min(free, key=lambda s: s.used_at)
            why = f"to make room for {slot.entry.id}: {self.budget.describe(sizes)}"
            await self._unload(victim, why)
            taken.remove(victim)
        return True

    async def _start(self, slot: _Slot) -> Model:
        entry = slot.entry
        began = time.perf_counter()
        log.info("loading model %s (%s)", entry.id, entry.path or entry.origin)
        try:
            model, slot.stored = await asyncio.to_thread(self._load_measured, entry)
        except ModelLoadError as exc:  # why (a path, a worker's exception) is the log's
            log.error("cannot load model %s: %s", entry.id, exc.message)
            raise ModelLoadError.of(entry.id) from exc
        except OmniError:  # written for clients (NotInstalled: the install command)
            raise
        except Exception as exc:  # a broken folder, a missing file: this request's error
            log.error("cannot load model %s", entry.id, exc_info=exc)
            raise ModelLoadError.of(entry.id) from exc
        finally:
            slot.loading = None
        slot.model, slot.loaded_at = model, time.time()
        slot.used_at = time.monotonic()
        log.info("loaded model %s in %.1fs", entry.id, time.perf_counter() - began)
        if self.on_engine is not None and entry.kind == "chat":
            self.on_engine(cast(Engine, model))
        return model

    def _load_measured(self, entry: ModelEntry) -> tuple[Model, int | None]:
        """Blocking: `entry` loaded, and the bytes of the folder it was loaded from."""
        model = self._load(entry)
        return model, on_disk(model)

    async def _unload(self, slot: _Slot, why: str) -> None:
        model, slot.model, slot.loaded_at = slot.model, None, None
        if model is not None and slot.owned:
            log.info("unloading model %s (%s)", slot.entry.id, why)
            await asyncio.to_thread(model.close)

    # --- idle models, and the end -----------------------------------------------------

    def start(self) -> None:
        """Unload the models idle for longer than idle_ttl, from now on."""
        if self.idle_ttl is not None and self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(self.idle_ttl), name="omni-idle-models")

    async def _reap(self, ttl: float) -> None:
        while True:
            await asyncio.sleep(min(ttl, 1.0))
            now = time.monotonic()
            for slot in list(self._slots.values()):
                if slot.model is not None and not slot.busy() and now - slot.used_at >= ttl:
                    await self._unload(slot, f"idle for {ttl:g}s")

    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        for slot in self._slots.values():
            if slot.loading is not None:
                slot.loading.cancel()
        for slot in self._slots.values():
            await self._unload(slot, "the server stops")

    def describe(self, entry: ModelEntry) -> dict[str, Any]:
        """An entry as /v1/models lists it (OpenAI's fields, then Omni's)."""
        slot = self._slots[entry.id]
        loading = slot.model is not None and slot.model.loading
        return {
            "id": entry.id,
            "object": "model",
            "created": int(slot.loaded_at or self.started),
            "owned_by": "omni",
            "kind": entry.kind,
            "vision": entry.vision,  # it takes images (input_image, image_url parts)
            "loaded": slot.model is not None and not loading,
            "loading": slot.loading is not None or loading,
            "origin": entry.origin,
            "size_bytes": entry.size_bytes,
            "aliases": sorted(a for a, t in self.aliases.items() if t == entry.id),
        }
