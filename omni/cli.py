"""`omni serve` and `omni db upgrade`. Start-up failures are one clear line, not a traceback."""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import json
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni import __version__, db, db_commands, inspect_cli, logs, models_cli
from omni.api.keys import KeyRing, api_key, read_key_file
from omni.catalogue import GB
from omni.errors import OmniError
from omni.heap import set_aside
from omni.location import is_postgres, normal, shown
from omni.service.defaults import Defaults
from omni.settings import EngineSettings, ServerSettings, engine_knobs

if TYPE_CHECKING:
    from omni.api.gate import Access
    from omni.image_hosts import ImageHosts

log = logging.getLogger("omni")
BIG = 2**63 - 1  # SQLite's largest integer
SERVER, ENGINE = ServerSettings, EngineSettings  # the defaults
# After a stop's endings are committed: for the connections that follow them to send them.
DELIVERY_S = 5.0


def _env(name: str, default: str | None) -> str | None:
    """OMNI_<name>, or `default` where it is unset or empty."""
    return os.environ.get(f"OMNI_{name}") or default


def _switched(name: str) -> bool:
    """Whether OMNI_<name> turns an on/off flag on (1, true, yes; any case)."""
    return (_env(name, "") or "").lower() in ("1", "true", "yes")


def _add_number(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: type,
    low: float,
    high: float,
    default: str | None,
    help: str | None = None,
) -> None:
    """A numeric setting: the flag, else OMNI_<FLAG> (--max-queued: OMNI_MAX_QUEUED), else
    `default` (None: unset); whichever it is must be a finite `kind` within [low, high]."""
    env = flag.removeprefix("--").replace("-", "_").upper()
    parser.add_argument(
        flag, type=_number(kind, low, high, env), default=_env(env, default), help=help
    )


def _number(kind: type, low: float, high: float, env: str) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` within [low, high], else a one-line usage error
    naming the range and where the value may have come from."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not low <= value <= high:
            bound = f"from {low} to {high}" if high < BIG else f"{low} or more"
            raise argparse.ArgumentTypeError(
                f"{text!r} (the flag or OMNI_{env}): expected {kind.__name__} {bound}"
            )
        return value

    return parse


def _duration(text: str) -> float:
    from omni.events.maintenance import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (the flag or OMNI_RETENTION)") from None


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _log_level(text: str) -> str:
    """An argparse type: a log level in any case, else a one-line usage error."""
    level = text.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} (the flag or OMNI_LOG_LEVEL): expected one of {', '.join(LOG_LEVELS)}"
        )
    return level


def _blas(text: str) -> str:
    """An argparse type: auto, bundled, or a BLAS library a fresh process could load."""
    from omni.runtime.platform import blas

    if text in (blas.AUTO, blas.BUNDLED):
        return text
    try:
        return blas.loadable(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} (the flag or OMNI_BLAS): {exc}") from None


def _weights(text: str) -> str:
    from omni.runtime.loading.weights import CHOICES

    if text not in CHOICES:
        raise argparse.ArgumentTypeError(
            f"{text!r} (the flag or OMNI_WEIGHTS): expected one of {', '.join(CHOICES)}"
        )
    return text


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's help ends with its default, where it has one (not for on/off switches)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """A parser whose subcommands (add_subparsers makes them of this class) show defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


class _Shown(str):
    """A `--db` default as help shows it: a URL's password never printed."""

    def __str__(self) -> str:
        return shown(str.__str__(self))


DB_HELP = "the event log: an SQLite file, or a postgresql:// URL"


def _db_default() -> str:
    return _Shown(_env("DB", SERVER.db_path) or SERVER.db_path)


def omni_home() -> Path:
    return Path(_env("HOME", None) or Path.home() / ".cache" / "omni").expanduser()


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="omni", description=__doc__)
    p.add_argument("--version", action="version", version=f"omni {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API")
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="address to listen on")
    _add_number(serve, "--port", int, 1, 65535, "10240", "port to listen on")
    serve.add_argument("--db", default=_db_default(), help=DB_HELP)
    serve.add_argument(
        "--replica-id",
        default=_env("REPLICA_ID", None),
        help="this server's name among replicas sharing a PostgreSQL log (default: its host, "
        "process id and a random part)",
    )
    _add_number(
        serve, "--lease", float, 1, 3600, str(int(SERVER.lease_s)),
        "seconds a replica's leases last unrenewed: a dead replica's work waits that long "
        "before another replica takes it (default: %(default)s)",
    )  # fmt: skip
    serve.add_argument(
        "--model",
        default=_env("MODEL", None),
        help="the chat model served by default: an id or alias of the catalogue (a --models-dir"
        " model's, a cached Hugging Face repo's), an mlx-lm folder, a .gguf file, or a Hugging"
        " Face repo id to fetch (default: SmolLM2-135M-Instruct)",
    )
    serve.add_argument(
        "--log-level",
        type=_log_level,
        default=_env("LOG_LEVEL", "info"),
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help="least severe log messages shown",
    )
    serve.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=_env("LOG_FORMAT", "text"),
        help="text lines, or one JSON object a line (default: %(default)s)",
    )
    serve.add_argument(
        "--log-file", default=_env("LOG_FILE", None), help="write logs there, not to stderr"
    )
    serve.add_argument(
        "--synchronous",
        choices=["NORMAL", "FULL"],
        default=(_env("SYNCHRONOUS", SERVER.synchronous) or SERVER.synchronous).upper(),
        help="SQLite synchronous mode: FULL makes every commit survive power loss (on"
        " PostgreSQL: FULL waits for each commit's WAL flush, synchronous_commit on)",
    )

    serve.add_argument(
        "--no-cache",
        action="store_true",
        default=_switched("NO_CACHE"),
        help="never answer a chat completion from the replay cache",
    )
    serve.add_argument(
        "--no-store-by-default",
        action="store_true",
        default=_switched("NO_STORE_BY_DEFAULT"),
        help="OpenAI's default: a chat or legacy completion whose request says nothing of"
        " `store` is not kept (purged once read, never replayed); without this flag it is",
    )
    _add_number(
        serve,
        "--cache-max-entries",
        int,
        -1,
        BIG,
        _shown(SERVER.cache_max_entries),
        "replay-cache entries kept (-1: no bound)",
    )
    # (seconds: their milliseconds must stay within SQLite's integers)
    _add_number(
        serve,
        "--cache-max-age",
        float,
        0,
        1e15,
        _shown(SERVER.cache_max_age_s),
        "seconds a replay-cache entry stays valid",
    )
    _add_number(
        serve,
        "--max-batch-size",
        int,
        1,
        BIG,
        _shown(ENGINE.max_batch),
        "requests decoded together (continuous batching)",
    )
    _add_number(
        serve,
        "--max-queued",
        int,
        1,
        BIG,
        _shown(SERVER.max_queued),
        "requests allowed to wait for the model; beyond: 429 with retry-after",
    )
    _add_number(
        serve,
        "--prompt-cache-entries",
        int,
        0,
        BIG,
        _shown(ENGINE.prompt_cache_entries),
        "KV caches of recent prompts kept for prefix reuse (0: none)",
    )
    _add_number(
        serve,
        "--prompt-cache-gb",
        float,
        0,
        BIG,
        _shown(ENGINE.prompt_cache_bytes / GB),
        "memory bound of the prefix (KV) cache",
    )
    serve.add_argument(
        "--retention",
        type=_duration,
        default=_env("RETENTION", None),
        metavar="DURATION",
        help="purge responses and completions that ended longer ago (30d, 12h): at start-up,"
        " then hourly (default: keep everything)",
    )
    _add_number(
        serve,
        "--shutdown-grace",
        float,
        0,
        1e6,
        _shown(SERVER.shutdown_grace_s),
        "seconds running generations get to finish on SIGTERM/SIGINT; then foreground ones"
        " end (their clients told) and background ones continue at the next start",
    )

    _add_runtime(serve)
    models_cli.add_serve_flags(serve, _add_number)
    _add_access(serve)
    _add_defaults(serve)

    dbp = sub.add_parser("db", help="database maintenance")
    dbsub = dbp.add_subparsers(dest="db_command", required=True)
    up = dbsub.add_parser("upgrade", help="apply the schema migrations")
    db_file = _db_default()
    up.add_argument("--db", default=db_file, help=DB_HELP)
    db_commands.add_parsers(dbsub, db_file)
    inspect_cli.add_parsers(sub, db_file)
    models_cli.add_parsers(sub)
    feats = sub.add_parser("features", help="what this install can serve, and how to add the rest")
    feats.add_argument("--json", action="store_true", help="one JSON object per feature")
    return p


def _add_runtime(serve: argparse.ArgumentParser) -> None:
    """How the engine runs the model on a CPU."""
    serve.add_argument(
        "--blas",
        type=_blas,
        default=_env("BLAS", ENGINE.blas),
        metavar="auto|bundled|PATH",
        help="the BLAS under the engine's matrix products on Linux with MLX's CPU build: auto:"
        " an installed OpenBLAS, else MLX's bundled reference BLAS; or a library's path",
    )
    serve.add_argument(
        "--weights",
        type=_weights,
        default=_env("WEIGHTS", ENGINE.weights),
        metavar="auto|stored|float32",
        help="the weights' format in the engine: auto: float32 for a small model on a CPU with"
        " an optimized BLAS (several times faster there), else as stored",
    )


def _add_access(serve: argparse.ArgumentParser) -> None:
    """Who may reach the server: API keys, host names, web origins, body size."""
    serve.add_argument(
        "--api-key",
        action="append",
        default=_list(_env("API_KEY", "")),
        metavar="KEY",
        help="a key clients must send as 'Authorization: Bearer KEY' (repeatable; "
        "OMNI_API_KEY: comma-separated)",
    )
    serve.add_argument(
        "--api-key-file",
        default=_env("API_KEY_FILE", None),
        metavar="PATH",
        help="a file of keys, one a line, optionally 'name:key' (the name is what the log records)",
    )
    serve.add_argument(
        "--allow-no-auth",
        action="store_true",
        default=_switched("ALLOW_NO_AUTH"),
        help="serve a non-loopback address without API keys (anyone who reaches it may use it)",
    )
    serve.add_argument(
        "--allowed-origins",
        action="append",
        default=_list(_env("ALLOWED_ORIGINS", "")),
        metavar="ORIGIN",
        help="web origins whose pages may call the API (CORS), comma-separated or repeated; "
        "'*': any (default: none)",
    )
    serve.add_argument(
        "--allowed-hosts",
        action="append",
        default=_list(_env("ALLOWED_HOSTS", "")),
        metavar="HOST",
        help="host names the server answers to beyond its own names and IP addresses "
        "(e.g. omni.example.com, *.example.com, '*': any)",
    )
    _add_number(
        serve, "--max-body-mb", float, 0.001, 1e6, "16", "largest request body, in MB (413 beyond)"
    )
    serve.add_argument(
        "--no-image-urls",
        action="store_true",
        default=_switched("NO_IMAGE_URLS"),
        help="fetch no http(s) image URL a request names (images come as data: URLs only): "
        "clients cannot make the server reach other hosts",
    )
    serve.add_argument(
        "--allow-image-hosts",
        action="append",
        default=_list(_env("ALLOW_IMAGE_HOSTS", "")),
        metavar="HOST|CIDR",
        help="hosts (images.lan, *.lan) or networks (10.1.0.0/16, 127.0.0.1) that image URLs "
        "may name although not public (repeatable or comma-separated; default: public "
        "addresses only)",
    )
    _add_number(
        serve,
        "--image-fetch-timeout",
        float,
        0.1,
        3600,
        _shown(SERVER.image_fetch_timeout_s),
        "seconds one image URL's fetch may take in all (redirects, connects, reads)",
    )


def _add_defaults(serve: argparse.ArgumentParser) -> None:
    """What a request gets for the sampling settings it leaves out (as mlx-lm's server); each
    unset by default: the model's own recommendation (its generation_config.json), else 1."""
    own = "the model's own, from its generation_config.json, else 1"
    _add_number(
        serve,
        "--temp",
        float,
        0,
        2,
        None,
        f"temperature of a request that sets none (default: {own})",
    )
    _add_number(
        serve,
        "--top-p",
        float,
        0.000001,
        1,
        None,
        f"top_p of a request that sets none (default: {own})",
    )
    _add_number(
        serve,
        "--max-tokens",
        int,
        1,
        BIG,
        None,
        "output cap of a request that sets none (max_output_tokens / max_tokens; default: none,"
        " it generates until the model stops or its context is full)",
    )
    serve.add_argument(
        "--chat-template-args",
        type=_template_args,
        default=_env("CHAT_TEMPLATE_ARGS", "{}"),  # argparse parses a string default too
        metavar="JSON",
        help="a JSON object passed to the chat template, e.g. '{\"enable_thinking\": false}'",
    )


def _shown(value: float) -> str:
    """A default as its flag takes it (and help shows it): 86400, not 86400.0."""
    return f"{value:g}"


def _list(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _flat(values: list[str]) -> tuple[str, ...]:
    return tuple(item for value in values for item in _list(value))


# apply_chat_template's own arguments, which the server sets itself.
_TEMPLATE_OWN = frozenset({"conversation", "tools", "add_generation_prompt", "tokenize"})


def _template_args(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--chat-template-args: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--chat-template-args: expected a JSON object")
    if taken := sorted(_TEMPLATE_OWN & value.keys()):
        raise argparse.ArgumentTypeError(
            f"--chat-template-args: {', '.join(taken)} is set by the server"
        )
    return value


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def access(args: argparse.Namespace) -> Access:
    """The gate's settings from the flags; refuses to expose a keyless server by accident."""
    from omni.api.gate import Access

    keys = [api_key(k.strip()) for k in args.api_key if k.strip()]
    if args.api_key_file:
        keys += read_key_file(args.api_key_file)
    ring = KeyRing(keys)
    if not ring and not is_loopback(args.host) and not args.allow_no_auth:
        raise OmniError(
            f"refusing to serve {args.host} without an API key: anyone who can reach it could "
            "use it. Set --api-key / --api-key-file (or OMNI_API_KEY), or pass --allow-no-auth "
            "to serve it open on purpose."
        )
    return Access(
        keys=ring,
        allowed_origins=_flat(args.allowed_origins),
        allowed_hosts=_flat(args.allowed_hosts),
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        host=args.host,
    )


def image_hosts(args: argparse.Namespace) -> ImageHosts:
    """What image URLs may name beyond public addresses (--allow-image-hosts)."""
    from omni.image_hosts import ImageHosts

    try:
        return ImageHosts.parse(_flat(args.allow_image_hosts))
    except ValueError as exc:
        raise OmniError(f"--allow-image-hosts: {exc}") from None


def check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OmniError(f"port {port} on {host} is already in use") from None
            raise OmniError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


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

    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from omni.api.app import create_app, shut_down
    from omni.runtime.embeddings.default import DEFAULT_EMBEDDING_ID
    from omni.runtime.loading.default_model import DEFAULT_MODEL_ID
    from omni.runtime.loading.loader import Loader
    from omni.runtime.transcription.default import DEFAULT_TRANSCRIPTION_ID
    from omni.service.models import Models

    gate = access(args)
    allowed_images = image_hosts(args)
    check_port(args.host, args.port)

    def progress(message: str) -> None:
        print(f"omni: {message}", file=sys.stderr, flush=True)

    # The log's verdict first (read only), then the model's, before anything is written: a
    # --model that names nothing found stops the start with no log made for it.
    db.inspect(args.db)
    aliases = models_cli.aliases(args)
    entries, named = models_cli.catalogue(args, omni_home(), aliases, progress)
    default = named.id if named is not None else DEFAULT_MODEL_ID
    if args.model and args.model not in (default, *aliases):  # a path, or the id in other case
        aliases[args.model] = default
    db.upgrade(args.db, verify=False)  # inspect() has read every page
    loader = Loader(omni_home(), engine_settings(args), progress)
    models = Models(
        entries,
        loader,
        default=default,
        default_embedding=DEFAULT_EMBEDDING_ID,
        default_transcription=DEFAULT_TRANSCRIPTION_ID,
        aliases=aliases,
        max_loaded=args.max_loaded_models,
        memory_budget=models_cli.memory_budget(args),
        idle_ttl=args.model_idle_ttl,
    )
    if args.adapter_path:  # the default answers with them (its plain weights stay listed)
        models.default = default = models.with_adapter(default, args.adapter_path)
    if args.draft_model:  # the default is decoded speculatively (and plain, by its own id)
        models.default = default = models.with_draft(default, args.draft_model)
    chat = sum(e.kind == "chat" for e in entries)
    budget = models.budget.memory
    room = "" if budget is None else f", {budget / GB:.1f} GB for the loaded ones"
    progress(f"{len(entries)} models in the catalogue ({chat} chat{room}); loading the default")
    engine = loader(models.find(default, "chat"))
    engine.wait_loaded()  # a start that cannot serve its default model fails here
    progress(f"engine: {engine.runtime}")
    models.adopt(engine)
    settings = ServerSettings(
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
    )
    app = create_app(settings, models)
    # Runs after the app's own start-up hooks (Quart runs them in order), recovery included.
    # Here, not in create_app: tests build many apps in one process. Runs that recovery
    # restarted are frozen too; reference counting still frees them when they end.
    app.before_serving(_set_aside_heap)

    config = Config()
    config.bind = [f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"]
    config.accesslog = None  # omni.access writes one line per request instead
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers, once
    # Hypercorn's wait for open connections begins once the grace is over (see `stopped`).
    config.graceful_timeout = DELIVERY_S

    async def run() -> None:
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

        progress(f"serving {default} on http://{args.host}:{args.port}/v1 (log: {shown(args.db)})")
        await hypercorn_serve(app, config, shutdown_trigger=stopped)

    try:
        asyncio.run(run())
    finally:
        for model in models.loaded():  # closed already, unless the loop ended early
            model.close()


def sampling_defaults(args: argparse.Namespace) -> Defaults:
    """What a request that leaves them out gets: the flags given, else the model's own."""
    return Defaults(args.temp, args.top_p, args.max_tokens)


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The engine's settings: its flags, and the knobs tests and benchmarks set in the
    environment (a knob set wrong: one line, as a flag's would be)."""
    try:
        knobs = engine_knobs()
    except ValueError as exc:
        raise OmniError(str(exc)) from None
    return EngineSettings(
        prompt_cache_entries=args.prompt_cache_entries,
        prompt_cache_bytes=int(args.prompt_cache_gb * GB),
        max_batch=args.max_batch_size,
        template_args=args.chat_template_args,
        blas=args.blas,
        weights=args.weights,
        num_draft_tokens=args.num_draft_tokens,
        **knobs,
    )


def _quiet_cancels(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Hypercorn cuts the connections still open after its wait (followers of background
    responses, which go on at the next start): asyncio would log each as a traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def _set_aside_heap() -> None:
    set_aside("server")


def print_features(as_json: bool) -> int:
    from omni import features

    every = features.every()
    named = max(len(str(f["name"])) for f in every)
    width = max(len(str(f["serves"])) for f in every)
    for facts in every:
        if as_json:
            print(json.dumps(facts))
        else:
            state = "yes" if facts["available"] else f"no: {facts['reason']}"
            print(f"{facts['name']:<{named}}  {facts['serves']:<{width}}  {state}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if hasattr(args, "db"):  # a plain path or URL from here on (sqlite:///x.db → x.db)
        try:
            args.db = normal(str.__str__(args.db))
        except OmniError as exc:
            print(f"omni: error: {exc.message}", file=sys.stderr)
            return 2
    level = getattr(args, "log_level", "info").upper()
    if args.command == "serve":  # the process is the server's: its log is all ours
        try:
            logs.setup(level, args.log_format, args.log_file)
        except (OSError, ValueError) as exc:  # a file it cannot open; OMNI_LOG_FORMAT=xml
            print(f"omni: error: {exc}", file=sys.stderr)
            return 1
    else:  # `omni db …` may run inside another program: leave its logging as it is
        logging.basicConfig(level=level, format=logs.TEXT)
    try:
        if args.command == "serve":
            serve(args)
        elif args.command == "models":
            return models_cli.run(args, omni_home())
        elif args.command == "features":
            return print_features(args.json)
        elif args.command in inspect_cli.COMMANDS:
            return inspect_cli.run(args)
        elif args.command == "db" and args.db_command != "upgrade":
            return db_commands.run(args)
        elif args.command == "db":
            db.upgrade(args.db)
            print(f"omni: database {shown(args.db)} is at the newest schema")
    except OmniError as exc:
        print(f"omni: error: {exc.message}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
