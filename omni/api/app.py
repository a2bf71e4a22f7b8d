"""The Quart application: resources opened in before_serving, closed after serving."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quart import Quart, Response

from omni import db
from omni.api import (
    access,
    audio,
    chat,
    embeddings,
    errors,
    gate,
    inspector,
    metrics,
    models,
    responses,
)
from omni.api import images as images_api
from omni.api import speech as speech_api
from omni.api.gate import Access
from omni.events import Appender, Notifier
from omni.events.backends import LogStore, make_store
from omni.events.postgres.store import PostgresStore
from omni.ids import new_id
from omni.location import is_postgres
from omni.metrics import Metrics
from omni.ports.chat import Engine
from omni.service.completions import CompletionsService
from omni.service.defaults import Defaults
from omni.service.embeddings import EmbeddingsService
from omni.service.generations import ImagesService
from omni.service.image_urls import Fetcher, ImageHosts
from omni.service.leasing import Leasing
from omni.service.leftovers import purge_unstored
from omni.service.models import Models
from omni.service.responses import ResponsesService
from omni.service.retention import Retention
from omni.service.sealing import Sealer
from omni.service.speech import SpeechService
from omni.service.stored import StoredCompletions
from omni.service.transcriptions import TranscriptionsService
from omni.settings import ServerSettings

# The app's settings (omni.settings), by the name the app has always given them.
Settings = ServerSettings

log = logging.getLogger(__name__)


@dataclass
class State:
    models: Models
    store: LogStore
    notifier: Notifier
    appender: Appender
    responses: ResponsesService
    completions: CompletionsService
    stored: StoredCompletions
    started_at: int
    metrics: Metrics
    retention: Retention | None = None
    embeddings: EmbeddingsService | None = None  # None: no model pool to embed with
    speech: SpeechService | None = None  # None: no model pool to speak with
    images: ImagesService | None = None  # None: no model pool to draw with
    transcriptions: TranscriptionsService | None = None  # None: no model pool to hear with
    shutdown_grace_s: float = ServerSettings.shutdown_grace_s
    stopping: asyncio.Task[None] | None = None  # the graceful stop, once begun

    @property
    def engine(self) -> Engine:
        """The default chat model's engine (loaded: tests and tools that serve one model)."""
        engines = {e.model_id: e for e in self.models.engines()}
        return engines.get(self.models.default) or next(iter(engines.values()))


def shut_down(app: Quart) -> asyncio.Task[None]:
    """Begin (or join) the graceful stop: new work is refused at once, running generations
    get the grace to end, then foreground ones are ended and background ones left for the
    next start (Runs.drain). Done when every ending is committed; the streams that follow
    responses then end after their last committed event, and their connections close."""
    state: State = app.config["OMNI"]
    if state.stopping is None:
        state.stopping = asyncio.create_task(_stop(state), name="omni-shutdown")
    return state.stopping


async def _stop(state: State) -> None:
    await state.responses.runs.drain(state.shutdown_grace_s)
    # Every ending is committed: the streams of what goes on at the next start end now, on
    # a frame boundary and with a whole body, rather than cut when Hypercorn stops waiting.
    state.notifier.stop()


def create_app(settings: Settings, served: Models | Engine) -> Quart:
    """An app serving `served` (the models, or one engine, loaded already, alone) over the
    log at settings.db_path (an SQLite file or a PostgreSQL URL)."""
    pool = served if isinstance(served, Models) else Models.single(served, *settings.model_aliases)
    app = Quart("omni")
    errors.install(app)
    figures = Metrics()  # this app's alone: never the process-wide default registry
    access.install(app, figures)  # first: requests the gate refuses are logged by their route
    gate.install(app, settings.access or Access())
    for prefix in ("/v1", ""):
        app.register_blueprint(responses.bp, url_prefix=prefix, name=f"responses{prefix}")
        app.register_blueprint(models.bp, url_prefix=prefix, name=f"models{prefix}")
        app.register_blueprint(chat.bp, url_prefix=prefix, name=f"chat{prefix}")
        app.register_blueprint(embeddings.bp, url_prefix=prefix, name=f"embeddings{prefix}")
        app.register_blueprint(speech_api.bp, url_prefix=prefix, name=f"speech{prefix}")
        app.register_blueprint(images_api.bp, url_prefix=prefix, name=f"images{prefix}")
        app.register_blueprint(audio.bp, url_prefix=prefix, name=f"audio{prefix}")
    app.register_blueprint(metrics.bp)
    app.register_blueprint(inspector.bp)

    @app.after_request
    async def request_id(response: Response) -> Response:
        # The SDK reports it as exc.request_id; it helps match a client error to the log.
        response.headers.setdefault("x-request-id", new_id("req"))
        return response

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> Any:
        state: State | None = app.config.get("OMNI")
        if state is not None:
            state.store.check_file()  # a 503 once the log's file is deleted or replaced
        if state is not None and state.responses.runs.closing:  # so balancers look elsewhere
            return {"status": "shutting_down"}, 503
        return {"status": "ok"}

    @app.before_serving
    async def open_resources() -> None:
        # `omni serve` has read every page already (PRAGMA quick_check), before loading the model.
        await asyncio.to_thread(db.upgrade, settings.db_path, False)
        notifier = Notifier()
        store = make_store(
            settings.db_path,
            notifier,
            synchronous=settings.synchronous,
            # The database indexes what may be replayed; a cache that is off keeps nothing.
            cache_max_entries=settings.cache_max_entries if _cache_on(settings) else 0,
            cache_max_age_s=settings.cache_max_age_s,
        )
        await store.open()
        # A PostgreSQL log may be shared by several servers: each leases what it runs there.
        shared = settings.shared or is_postgres(settings.db_path)
        leasing = Leasing(store.leases, settings.replica, settings.lease_s, shared)
        if shared and isinstance(store, PostgresStore):
            store.replica = leasing.replica  # what another replica took over, it writes alone
        # What an earlier process left of unstored requests (and no other server serves).
        await purge_unstored(store, leasing)
        appender = Appender(store, notifier, metrics=figures)
        appender.start()
        defaults = settings.defaults or Defaults()
        service = ResponsesService(
            store,
            appender,
            notifier,
            pool,
            settings.keepalive,
            settings.max_queued,
            Sealer.from_home(Path(settings.home)) if settings.home else Sealer(os.urandom(32)),
            defaults,
        )
        cache = _cache_on(settings)
        completions = CompletionsService(
            store,
            appender,
            notifier,
            pool,
            service.runs,
            settings.keepalive,
            cache,
            defaults,
            service.prompter,
            store_by_default=settings.store_by_default,
        )
        service.runs.metrics = completions.metrics = figures
        figures.watch(
            lambda: sum(e.queued for e in pool.engines()),
            lambda: sum(e.running for e in pool.engines()),
        )

        def observe(engine: Engine) -> None:  # each decode step's batch, of every chat model
            engine.on_step = lambda n: figures.batch.observe(n) if n else None

        pool.on_engine = observe
        for engine in pool.engines():
            observe(engine)
        pool.start()
        service.runs.leasing = leasing
        hosts, deadline_s = settings.image_hosts or ImageHosts(), settings.image_fetch_timeout_s
        fetcher = Fetcher(hosts, deadline_s=deadline_s) if settings.fetch_images else None
        service.image_fetcher = completions.image_fetcher = fetcher
        await service.recover()
        await completions.recover()
        embedding = EmbeddingsService(store, appender, pool, figures, leasing)
        await embedding.recover()
        speaking = SpeechService(store, appender, pool, leasing, figures)
        await speaking.recover()
        drawing = ImagesService(store, appender, pool, leasing)
        await drawing.recover()
        hearing = TranscriptionsService(
            store, appender, notifier, pool, leasing, settings.keepalive, figures
        )
        await hearing.recover()

        async def take_over(streams: list[str]) -> None:
            """Another server's work, its lease expired: as a restart would, here."""
            await service.recover(streams)
            await completions.recover(streams)
            await embedding.recover(streams)
            await speaking.recover(streams)
            await drawing.recover(streams)
            await hearing.recover(streams)
            await purge_unstored(store, leasing)
            await leasing.release([s for s in streams if service.runs.get(s) is None])

        leasing.start(take_over)
        if cache and await store.cache.size() == 0:
            await store.cache.rebuild()  # the index is a projection of the log: lost, made again
        app.config["OMNI"] = State(
            pool,
            store,
            notifier,
            appender,
            service,
            completions,
            StoredCompletions(store, appender),
            int(time.time()),
            figures,
            embeddings=embedding,
            speech=speaking,
            images=drawing,
            transcriptions=hearing,
            shutdown_grace_s=settings.shutdown_grace_s,
        )
        if settings.retention_s is not None:  # after recovery: it ends what a crash left open
            retention = Retention(store, settings.retention_s, settings.retention_every_s)
            app.config["OMNI"].retention = retention
            retention.start()

    @app.after_serving
    async def close_resources() -> None:
        state: State = app.config["OMNI"]
        try:
            if state.stopping is not None:  # begun by a signal: let it end
                await state.stopping
            if state.retention is not None:
                await state.retention.close()
            await state.responses.runs.leasing.close()
            await state.completions.close()
            await state.responses.close()
            if state.transcriptions is not None:
                await state.transcriptions.close()
            if state.speech is not None:
                await state.speech.close()
            await state.appender.stop()
            await state.models.close()
        finally:  # what reached the writer commits before the process exits
            await state.store.close()

    return app


def _cache_on(settings: Settings) -> bool:
    """A bound of 0 entries or 0 seconds keeps nothing: the cache is off, single flight too."""
    return settings.cache and settings.cache_max_entries != 0 and settings.cache_max_age_s > 0
