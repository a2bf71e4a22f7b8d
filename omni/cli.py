"""`omni serve` and `omni db upgrade`. Start-up failures are one clear line, not a traceback."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni import __version__, db, logs
from omni.errors import OmniError
from omni.heap import set_aside

log = logging.getLogger("omni")
BIG = 2**63 - 1  # SQLite's largest integer


def _env(name: str, default: str | None) -> str | None:
    """OMNI_<name>, or `default` where it is unset or empty."""
    return os.environ.get(f"OMNI_{name}") or default


def _add_number(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: type,
    low: float,
    high: float,
    default: str,
    help: str | None = None,
) -> None:
    """A numeric setting: the flag, else OMNI_<FLAG> (--max-queued: OMNI_MAX_QUEUED), else
    `default`; whichever it is must be a finite `kind` within [low, high]."""
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


def omni_home() -> Path:
    return Path(_env("HOME", None) or Path.home() / ".cache" / "omni").expanduser()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omni", description=__doc__)
    p.add_argument("--version", action="version", version=f"omni {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API")
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    _add_number(serve, "--port", int, 1, 65535, "10240")
    serve.add_argument("--db", default=_env("DB", "omni.db"), help="SQLite file (the event log)")
    serve.add_argument(
        "--model",
        default=_env("MODEL", None),
        help="mlx-lm folder, Hugging Face repo id or .gguf file (default: SmolLM2-135M-Instruct)",
    )
    serve.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
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
        default=(_env("SYNCHRONOUS", "NORMAL") or "NORMAL").upper(),
        help="SQLite synchronous mode: FULL makes every commit survive power loss",
    )

    serve.add_argument(
        "--no-cache",
        action="store_true",
        default=(_env("NO_CACHE", "") or "").lower() in ("1", "true", "yes"),
        help="never answer a chat completion from the replay cache",
    )
    _add_number(
        serve,
        "--cache-max-entries",
        int,
        -1,
        BIG,
        "1024",
        "replay-cache entries kept (-1: no bound)",
    )
    # (seconds: their milliseconds must stay within SQLite's integers)
    _add_number(
        serve,
        "--cache-max-age",
        float,
        0,
        1e15,
        "86400",
        "seconds a replay-cache entry stays valid",
    )
    _add_number(
        serve,
        "--max-batch-size",
        int,
        1,
        BIG,
        "32",
        "requests decoded together (continuous batching)",
    )
    _add_number(
        serve,
        "--max-queued",
        int,
        1,
        BIG,
        "256",
        "requests allowed to wait for the model; beyond: 429 with retry-after",
    )
    _add_number(
        serve,
        "--prompt-cache-entries",
        int,
        0,
        BIG,
        "16",
        "KV caches of recent prompts kept for prefix reuse (0: none)",
    )
    _add_number(
        serve, "--prompt-cache-gb", float, 0, BIG, "4", "memory bound of the prefix (KV) cache"
    )

    dbp = sub.add_parser("db", help="database maintenance")
    dbsub = dbp.add_subparsers(dest="db_command", required=True)
    up = dbsub.add_parser("upgrade", help="apply the schema migrations")
    up.add_argument("--db", default=_env("DB", "omni.db"))
    return p


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
    from omni.engine.device import keep_server_off_the_accelerator

    keep_server_off_the_accelerator()  # first: before anything imports mlx-lm

    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from omni.api.app import Settings, create_app
    from omni.engine.mlx_engine import MLXEngine
    from omni.engine.model_source import resolve_model

    db.upgrade(args.db)
    check_port(args.host, args.port)

    def progress(message: str) -> None:
        print(f"omni: {message}", file=sys.stderr, flush=True)

    source = resolve_model(args.model, omni_home(), progress)
    progress(f"loading model {source.model_id} from {source.path}")
    engine = MLXEngine(
        source,
        prompt_cache_entries=args.prompt_cache_entries,
        prompt_cache_bytes=int(args.prompt_cache_gb * (1 << 30)),
        max_batch=args.max_batch_size,
    )
    engine.start()
    aliases = frozenset(a for a in (args.model, source.path) if a)
    settings = Settings(
        db_path=args.db,
        synchronous=args.synchronous,
        model_aliases=aliases,
        cache=not args.no_cache,
        cache_max_entries=args.cache_max_entries,
        cache_max_age_s=args.cache_max_age,
        max_queued=args.max_queued,
        home=str(omni_home()),
    )
    app = create_app(settings, engine)
    # Runs after the app's own start-up hooks (Quart runs them in order), recovery included.
    # Here, not in create_app: tests build many apps in one process. Runs that recovery
    # restarted are frozen too; reference counting still frees them when they end.
    app.before_serving(_set_aside_heap)

    config = Config()
    config.bind = [f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"]
    config.accesslog = None  # omni.access writes one line per request instead
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers, once

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        progress(f"serving {source.model_id} on http://{args.host}:{args.port}/v1 (log: {args.db})")
        await hypercorn_serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    try:
        asyncio.run(run())
    finally:
        engine.close()
    # Everything is committed and closed. Skip interpreter finalization: tearing down MLX's
    # global state while its worker threads live can abort the process ("terminate called").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def _set_aside_heap() -> None:
    set_aside("server")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = getattr(args, "log_level", "info").upper()
    try:
        logs.setup(level, getattr(args, "log_format", "text"), getattr(args, "log_file", None))
    except (OSError, ValueError) as exc:  # a file it cannot open; OMNI_LOG_FORMAT=xml
        print(f"omni: error: {exc}", file=sys.stderr)
        return 1
    try:
        if args.command == "serve":
            serve(args)
        elif args.command == "db":
            db.upgrade(args.db)
            print(f"omni: database {args.db} is at the newest schema")
    except OmniError as exc:
        print(f"omni: error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
