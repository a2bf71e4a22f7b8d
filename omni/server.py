"""The composition root: a Server built from the settings owns the log, the model pool, the
leases, the metrics, the lifecycle and one service per modality, each built with what it needs.
Recovery at start, taking over a dead server's work and closing are loops over the modalities.
The Quart app (omni.api.app) opens one before serving, routes to it, and closes it after."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omni import db
from omni.events import Appender, Notifier
from omni.events.backends import LogStore, make_store
from omni.events.postgres.store import PostgresStore
from omni.image_hosts import ImageHosts
from omni.lifecycle import Lifecycle
from omni.location import is_postgres
from omni.metrics import Metrics, folder_bytes
from omni.ports.chat import Engine
from omni.service.completions import CompletionsService
from omni.service.conversations import ConversationsService
from omni.service.defaults import Defaults
from omni.service.embeddings import EmbeddingsService
from omni.service.image_urls import Fetcher
from omni.service.images import ImagesService
from omni.service.leasing import Leasing
from omni.service.leftovers import purge_unstored
from omni.service.messages import MessagesService
from omni.service.modality import Modality
from omni.service.models import Models
from omni.service.responses import ResponsesService
from omni.service.retention import Retention
from omni.service.sampler import Loaded, Sampler
from omni.service.sealing import Sealer
from omni.service.speech import SpeechService
from omni.service.stored import StoredCompletions
from omni.service.transcriptions import TranscriptionsService
from omni.settings import Ranks, ServerSettings


@dataclass(eq=False)
class Server:
    models: Models
    store: LogStore
    notifier: Notifier
    appender: Appender
    leasing: Leasing
    metrics: Metrics
    lifecycle: Lifecycle
    responses: ResponsesService
    conversations: ConversationsService
    completions: CompletionsService
    messages: MessagesService
    embeddings: EmbeddingsService
    speech: SpeechService
    images: ImagesService
    transcriptions: TranscriptionsService
    stored: StoredCompletions
    started_at: int
    sampler: Sampler  # the loaded models and their queues over time (the dashboard's)
    retention: Retention | None = None  # None: everything is kept
    ranks: Ranks | None = None  # the chat models' ranks, where they are sharded

    @property
    def modalities(self) -> tuple[Modality, ...]:
        """Every modality's service, once: recovered in this order, closed in reverse."""
        return (
            self.responses,
            self.conversations,
            self.completions,
            self.messages,
            self.embeddings,
            self.speech,
            self.images,
            self.transcriptions,
        )

    @property
    def engine(self) -> Engine:
        """The default chat model's engine (loaded: tests and tools that serve one model)."""
        engines = {e.model_id: e for e in self.models.engines()}
        return engines.get(self.models.default) or next(iter(engines.values()))

    async def recover(self, among: Sequence[str] | None = None) -> None:
        """What a crash left open, of every modality (only those `among` these streams)."""
        for modality in self.modalities:
            await modality.recover(among)

    async def take_over(self, streams: list[str]) -> None:
        """Another server's work, its lease expired: as a restart would, here."""
        await self.recover(streams)
        await purge_unstored(self.store, self.leasing)
        await self.leasing.release([s for s in streams if self.responses.runs.get(s) is None])

    async def close(self) -> None:
        try:
            await self.lifecycle.stopped()  # begun by a signal: let it end
            if self.retention is not None:
                await self.retention.close()
            await self.sampler.close()
            await self.leasing.close()
            for modality in reversed(self.modalities):
                await modality.close()
            await self.appender.stop()
            await self.models.close()
        finally:  # what reached the writer commits before the process exits
            await self.store.close()


async def build(
    settings: ServerSettings, served: Models | Engine, metrics: Metrics | None = None
) -> Server:
    """A server of `served` (the models, or one engine, loaded already, alone) over the log at
    settings.db_path (an SQLite file or a PostgreSQL URL), open, recovered and serving;
    `metrics`: the registry its figures go to (None: one of its own)."""
    pool = served if isinstance(served, Models) else Models.single(served, *settings.model_aliases)
    figures = metrics or Metrics()
    # `omni serve` has read every page already (PRAGMA quick_check), before loading the model.
    await asyncio.to_thread(db.upgrade, settings.db_path, False)
    notifier = Notifier()
    cache = cache_on(settings)
    store = make_store(
        settings.db_path,
        notifier,
        synchronous=settings.synchronous,
        # The database indexes what may be replayed; a cache that is off keeps nothing.
        cache_max_entries=settings.cache_max_entries if cache else 0,
        cache_max_age_s=settings.cache_max_age_s,
    )
    await store.open()
    leasing = _leasing(settings, store)
    # What an earlier process left of unstored requests (and no other server serves).
    await purge_unstored(store, leasing)
    appender = Appender(store, notifier, metrics=figures)
    appender.start()
    defaults = settings.defaults or Defaults()
    fetcher = _fetcher(settings)
    conversations = ConversationsService(store, appender)
    responses = ResponsesService(
        store, appender, notifier, pool, settings.keepalive, settings.max_queued,
        _sealer(settings), defaults, leasing=leasing, metrics=figures, image_fetcher=fetcher,
        conversations=conversations,
    )  # fmt: skip
    completions = CompletionsService(
        store, appender, notifier, pool, responses.runs, settings.keepalive, cache, defaults,
        responses.prompter, store_by_default=settings.store_by_default, metrics=figures,
        image_fetcher=fetcher,
    )  # fmt: skip
    _watch(pool, figures, settings.prompt_cache_dir)
    if (ranks := settings.ranks) is not None:
        figures.ranks.labels(ranks.backend, ranks.sharding).set(ranks.count)
    pool.start()
    server = Server(
        pool, store, notifier, appender, leasing, figures,
        Lifecycle(responses.runs, notifier, settings.shutdown_grace_s),
        responses,
        conversations,
        completions,
        MessagesService(completions, responses.sealer),
        EmbeddingsService(store, appender, pool, leasing=leasing, metrics=figures),
        SpeechService(store, appender, pool, leasing=leasing, metrics=figures),
        ImagesService(store, appender, pool, leasing=leasing),
        TranscriptionsService(store, appender, notifier, pool, leasing=leasing,
                              keepalive=settings.keepalive, metrics=figures),
        StoredCompletions(store, appender),
        int(time.time()),
        _sampler(pool),
        ranks=settings.ranks,
    )  # fmt: skip
    await server.recover()
    leasing.start(server.take_over)
    server.sampler.start()
    if cache and await store.cache.size() == 0:
        await store.cache.rebuild()  # the index is a projection of the log: lost, made again
    if settings.retention_s is not None:  # after recovery: it ends what a crash left open
        server.retention = Retention(store, settings.retention_s, settings.retention_every_s)
        server.retention.start()
    return server


def cache_on(settings: ServerSettings) -> bool:
    """A bound of 0 entries or 0 seconds keeps nothing: the cache is off, single flight too."""
    return settings.cache and settings.cache_max_entries != 0 and settings.cache_max_age_s > 0


def _leasing(settings: ServerSettings, store: LogStore) -> Leasing:
    # A PostgreSQL log may be shared by several servers: each leases what it runs there.
    shared = settings.shared or is_postgres(settings.db_path)
    leasing = Leasing(store.leases, settings.replica, settings.lease_s, shared)
    if shared and isinstance(store, PostgresStore):
        store.replica = leasing.replica  # what another replica took over, it writes alone
    return leasing


def _fetcher(settings: ServerSettings) -> Fetcher | None:
    """How http(s) image URLs are fetched (None: --no-image-urls, they are refused)."""
    if not settings.fetch_images:
        return None
    hosts = settings.image_hosts or ImageHosts()
    return Fetcher(hosts, deadline_s=settings.image_fetch_timeout_s)


def _sealer(settings: ServerSettings) -> Sealer:
    """The reasoning key: OMNI_HOME's, else one of this process's own."""
    return Sealer.from_home(Path(settings.home)) if settings.home else Sealer(os.urandom(32))


def _sampler(pool: Models) -> Sampler:
    return Sampler(lambda: tuple(Loaded(m.model_id, m.queued, m.running) for m in pool.loaded()))


def _watch(pool: Models, figures: Metrics, disk_folder: str | None) -> None:
    """The pool's queue and running figures, the prefix cache's disk tier, and each decode
    step's batch of every chat model."""
    figures.watch(
        lambda: sum(e.queued for e in pool.engines()),
        lambda: sum(e.running for e in pool.engines()),
        lambda: folder_bytes(disk_folder),
    )

    def observe(engine: Engine) -> None:
        engine.on_step = lambda n: figures.batch.observe(n) if n else None

    pool.on_engine = observe
    for engine in pool.engines():
        observe(engine)
