"""`omni serve`: the flags made settings, the log's and the model's verdicts before anything is
written, then Hypercorn until SIGINT/SIGTERM. Start-up failures are one clear line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni import db
from omni.catalogue import GB
from omni.cli import catalogue
from omni.cli.access import access, check_port, image_hosts
from omni.cli.options import omni_home
from omni.cli.serve_flags import DISK_CAP_GB
from omni.errors import OmniError
from omni.heap import set_aside
from omni.location import is_postgres, shown
from omni.service.defaults import Defaults
from omni.settings import EngineSettings, Ranks, ServerSettings, engine_knobs

if TYPE_CHECKING:
    from hypercorn.config import Config
    from quart import Quart

    from omni.api.gate import Access
    from omni.catalogue import ModelEntry
    from omni.image_hosts import ImageHosts
    from omni.service.models import Models

log = logging.getLogger("omni")
# After a stop's endings are committed: for the connections that follow them to send them.
DELIVERY_S = 5.0


def serve(args: argparse.Namespace) -> None:
    """Serve under the database's lock, taken before anything reads or recovers the log and
    held until all is committed; a failed start removes the database it created, if empty."""
    from omni.lock import DatabaseLock, PostgresLock
    from omni.service.leasing import replica_id

    postgres = is_postgres(args.db)
    if postgres:  # replicas share the log; each names itself (a random name by default)
        args.replica_id = args.replica_id or replica_id()
        lock: DatabaseLock | PostgresLock = PostgresLock.acquire(args.db, args.replica_id)
    else:
        lock = DatabaseLock.acquire(args.db)
    created = not postgres and not os.path.exists(args.db)
    try:
        _serve(args)
    except BaseException:
        if created:
            db.discard_unused(args.db)
        raise
    finally:
        lock.release()
    # Everything is committed and closed. Skip interpreter finalization: tearing down MLX's
    # global state while its worker threads live can abort the process ("terminate called").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve(args: argparse.Namespace) -> None:
    from omni.runtime.platform.device import keep_server_off_the_accelerator
    from omni.runtime.platform.quiet import no_torch_advice

    keep_server_off_the_accelerator()  # first: before anything imports mlx-lm
    no_torch_advice()

    from omni.api.app import create_app

    gate = access(args)
    allowed_images = image_hosts(args)
    check_port(args.host, args.port)
    # The log's verdict first (read only), then the model's, before anything is written: a
    # --model that names nothing found stops the start with no log made for it.
    db.inspect(args.db)
    entries, default, aliases = _catalogue_and_default(args)
    db.upgrade(args.db, verify=False)  # inspect() has read every page
    sharded = ranks(args)
    models = _models(args, entries, default, aliases, sharded)
    settings = server_settings(args, gate, allowed_images, sharded)
    app = create_app(settings, models)
    # Runs after the app's own start-up hooks (Quart runs them in order), recovery included.
    # Here, not in create_app: tests build many apps in one process. Runs that recovery
    # restarted are frozen too; reference counting still frees them when they end.
    app.before_serving(_set_aside_heap)
    try:
        asyncio.run(_listen(args, app, models.default))
    finally:
        for model in models.loaded():  # closed already, unless the loop ended early
            model.close()


def _progress(message: str) -> None:
    print(f"omni: {message}", file=sys.stderr, flush=True)


def _catalogue_and_default(
    args: argparse.Namespace,
) -> tuple[list[ModelEntry], str, dict[str, str]]:
    """The catalogue, the default chat model's id and the aliases (--model's spelling of the
    default among them, where it is a path or the id in another case)."""
    from omni.runtime.loading.default_model import DEFAULT_MODEL_ID

    aliases = catalogue.aliases(args)
    entries, named = catalogue.catalogue(args, omni_home(), aliases, _progress)
    default = named.id if named is not None else DEFAULT_MODEL_ID
    if args.model and args.model not in (default, *aliases):  # a path, or the id in other case
        aliases[args.model] = default
    return entries, default, aliases


def _models(
    args: argparse.Namespace,
    entries: list[ModelEntry],
    default: str,
    aliases: dict[str, str],
    sharded: Ranks | None = None,
) -> Models:
    """The model pool, its default loaded (a start that cannot serve it fails here)."""
    from omni.runtime.embeddings.default import DEFAULT_EMBEDDING_ID
    from omni.runtime.loading.loader import Loader
    from omni.runtime.transcription.default import DEFAULT_TRANSCRIPTION_ID
    from omni.service.models import Models

    loader = Loader(omni_home(), engine_settings(args, sharded), _progress)
    models = Models(
        entries,
        loader,
        default=default,
        default_embedding=DEFAULT_EMBEDDING_ID,
        default_transcription=DEFAULT_TRANSCRIPTION_ID,
        aliases=aliases,
        max_loaded=args.max_loaded_models,
        memory_budget=catalogue.memory_budget(args),
        idle_ttl=args.model_idle_ttl,
    )
    if args.adapter_path:  # the default answers with them (its plain weights stay listed)
        models.default = default = models.with_adapter(default, args.adapter_path)
    if args.draft_model:  # the default is decoded speculatively (and plain, by its own id)
        models.default = default = models.with_draft(default, args.draft_model)
    chat = sum(e.kind == "chat" for e in entries)
    budget = models.budget.memory
    room = "" if budget is None else f", {budget / GB:.1f} GB for the loaded ones"
    _progress(f"{len(entries)} models in the catalogue ({chat} chat{room}); loading the default")
    engine = loader(models.find(default, "chat"))
    engine.wait_loaded()  # a start that cannot serve its default model fails here
    _progress(f"engine: {engine.runtime}")
    models.adopt(engine)
    return models


def server_settings(
    args: argparse.Namespace, gate: Access, allowed_images: ImageHosts, sharded: Ranks | None
) -> ServerSettings:
    """The server's settings: its flags, and who may reach it."""
    return ServerSettings(
        db_path=args.db,
        synchronous=args.synchronous,
        cache=not args.no_cache,
        cache_max_entries=args.cache_max_entries,
        cache_max_age_s=args.cache_max_age,
        max_queued=args.max_queued,
        home=str(omni_home()),
        access=gate,
        defaults=sampling_defaults(args),
        retention_s=args.retention,
        shutdown_grace_s=args.shutdown_grace,
        replica=args.replica_id,
        lease_s=args.lease,
        fetch_images=not args.no_image_urls,
        store_by_default=not args.no_store_by_default,
        image_hosts=allowed_images,
        image_fetch_timeout_s=args.image_fetch_timeout,
        # what /metrics reports (the engine's disk_tier measures the free space, once)
        prompt_cache_dir=None if args.prompt_cache_disk_gb == 0 else str(disk_folder(args)),
        ranks=sharded,
    )


def ranks(args: argparse.Namespace) -> Ranks | None:
    """The chat models' ranks where --ranks or --hostfile shards them: a host file's hosts
    rank by rank, and the backend by MLX's rules where --distributed-backend is not given
    (omni.runtime.chat.ranks.host_file, local_backend)."""
    from omni.runtime.chat.ranks import host_file, local_backend

    hosts: tuple[str, ...] = ()
    named = None
    if args.hostfile:
        try:
            hosts, named = host_file(args.hostfile)
        except ValueError as exc:
            raise OmniError(f"--hostfile: {exc}") from None
    elif args.ranks <= 1:
        return None
    backend = args.distributed_backend or named or local_backend()
    return Ranks(len(hosts) or args.ranks, backend, args.sharding, args.hostfile, hosts,
                 args.rank_timeout)  # fmt: skip


def sampling_defaults(args: argparse.Namespace) -> Defaults:
    """What a request that leaves them out gets: the flags given, else the model's own."""
    return Defaults(args.temp, args.top_p, args.max_tokens)


def engine_settings(args: argparse.Namespace, sharded: Ranks | None = None) -> EngineSettings:
    """The engine's settings: its flags, and the knobs tests and benchmarks set in the
    environment (a knob set wrong: one line, as a flag's would be)."""
    try:
        knobs = engine_knobs()
    except ValueError as exc:
        raise OmniError(str(exc)) from None
    folder, disk_bytes = disk_tier(args)
    return EngineSettings(
        prompt_cache_entries=args.prompt_cache_entries,
        prompt_cache_bytes=int(args.prompt_cache_gb * GB),
        prompt_cache_dir=folder,
        prompt_cache_disk_bytes=disk_bytes,
        max_batch=args.max_batch_size,
        template_args=args.chat_template_args,
        blas=args.blas,
        weights=args.weights,
        num_draft_tokens=args.num_draft_tokens,
        ranks=sharded,
        **knobs,
    )


def disk_folder(args: argparse.Namespace) -> Path:
    """The prefix cache's disk tier's folder: --prompt-cache-dir, else OMNI_HOME/kv."""
    return Path(args.prompt_cache_dir or omni_home() / "kv").expanduser()


def disk_tier(args: argparse.Namespace) -> tuple[str | None, int]:
    """The prefix cache's disk tier: its folder and size (None, 0: none). By default
    a tenth of its disk's free space, at most DISK_CAP_GB."""
    folder = disk_folder(args)
    if args.prompt_cache_disk_gb is not None:
        size = int(args.prompt_cache_disk_gb * GB)
    else:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            size = min(shutil.disk_usage(folder).free // 10, DISK_CAP_GB * GB)
        except OSError:  # a folder it cannot make: no disk tier, said once
            log.warning("the prefix cache's disk tier is off: %s cannot be used", folder)
            size = 0
    return (str(folder), size) if size > 0 else (None, 0)


def _config(args: argparse.Namespace) -> Config:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"]
    config.accesslog = None  # omni.access writes one line per request instead
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers, once
    # Hypercorn's wait for open connections begins once the grace is over (see `stopped`).
    config.graceful_timeout = DELIVERY_S
    return config


async def _listen(args: argparse.Namespace, app: Quart, default: str) -> None:
    """Hypercorn until SIGINT or SIGTERM; then the app's shut-down, still listening."""
    from hypercorn.asyncio import serve as hypercorn_serve

    from omni.api.app import shut_down

    config = _config(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.set_exception_handler(_quiet_cancels)

    async def stopped() -> None:
        """Still listening through the grace (creates answer 503), then Hypercorn stops."""
        await stop.wait()
        log.info("stopping: up to %gs for running generations", args.shutdown_grace)
        await shut_down(app)

    _progress(f"serving {default} on http://{args.host}:{args.port}/v1 (log: {shown(args.db)})")
    await hypercorn_serve(app, config, shutdown_trigger=stopped)


def _quiet_cancels(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Hypercorn cuts the connections still open after its wait (followers of background
    responses, which go on at the next start): asyncio would log each as a traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def _set_aside_heap() -> None:
    set_aside("server")
