"""`omni serve`'s flags, each defaulting to its OMNI_<NAME> variable: where it listens and logs,
the log, the caches and queues, the engine, the models, who may reach it, sampling defaults."""

from __future__ import annotations

import argparse
import json
from typing import Any

from omni.catalogue import GB
from omni.cli import catalogue, logs
from omni.cli.options import (
    BIG,
    DB_HELP,
    Number,
    add_number,
    add_switch,
    db_default,
    env,
    listed,
    parsed,
    shown_default,
)
from omni.settings import EngineSettings, Ranks, ServerSettings

SERVER, ENGINE = ServerSettings, EngineSettings  # the defaults
DISK_CAP_GB = 50  # the disk tier's default size: a tenth of the free space, at most this
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# (seconds: their milliseconds must stay within SQLite's integers)
CACHES_AND_QUEUES = (
    Number("--cache-max-entries", int, -1, BIG, shown_default(SERVER.cache_max_entries),
           "replay-cache entries kept (-1: no bound)"),
    Number("--cache-max-age", float, 0, 1e15, shown_default(SERVER.cache_max_age_s),
           "seconds a replay-cache entry stays valid"),
    Number("--max-batch-size", int, 1, BIG, shown_default(ENGINE.max_batch),
           "requests decoded together (continuous batching)"),
    Number("--max-queued", int, 1, BIG, shown_default(SERVER.max_queued),
           "requests allowed to wait for the model; beyond: 429 with retry-after"),
    Number("--prompt-cache-entries", int, 0, BIG, shown_default(ENGINE.prompt_cache_entries),
           "most KV caches kept in memory for prefix reuse (0: what --prompt-cache-gb holds)"),
    Number("--prompt-cache-gb", float, 0, BIG, shown_default(ENGINE.prompt_cache_bytes / GB),
           "memory bound of the prefix (KV) cache (0: no prefix cache)"),
)  # fmt: skip
SHUTDOWN_GRACE = Number(
    "--shutdown-grace", float, 0, 1e6, shown_default(SERVER.shutdown_grace_s),
    "seconds running generations get to finish on SIGTERM/SIGINT; then foreground ones"
    " end (their clients told) and background ones continue at the next start",
)  # fmt: skip
IMAGE_FETCH_TIMEOUT = Number(
    "--image-fetch-timeout", float, 0.1, 3600, shown_default(SERVER.image_fetch_timeout_s),
    "seconds one image URL's fetch may take in all (redirects, connects, reads)",
)  # fmt: skip
OWN = "the model's own, from its generation_config.json, else 1"
SAMPLING = (
    Number("--temp", float, 0, 2, None,
           f"temperature of a request that sets none (default: {OWN})"),
    Number("--top-p", float, 0.000001, 1, None,
           f"top_p of a request that sets none (default: {OWN})"),
    Number("--max-tokens", int, 1, BIG, None,
           "output cap of a request that sets none (max_output_tokens / max_tokens; default: none,"
           " it generates until the model stops or its context is full)"),
)  # fmt: skip


def add_serve(sub: Any) -> None:
    """`omni serve` on `omni`'s subparsers, its flags in the order its help lists them."""
    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API")
    _add_listening(serve)
    _add_logging(serve)
    _add_log_keeping(serve)
    _add_runtime(serve)
    catalogue.add_serve_flags(serve)
    _add_access(serve)
    _add_defaults(serve)


def _add_listening(serve: argparse.ArgumentParser) -> None:
    """Where the server listens, which log it writes and as whom, what it serves by default."""
    serve.add_argument("--host", default=env("HOST", "127.0.0.1"), help="address to listen on")
    add_number(serve, Number("--port", int, 1, 65535, "10240", "port to listen on"))
    serve.add_argument("--db", default=db_default(), help=DB_HELP)
    serve.add_argument(
        "--replica-id",
        default=env("REPLICA_ID", None),
        help="this server's name among replicas sharing a PostgreSQL log (default: its host, "
        "process id and a random part)",
    )
    add_number(serve, Number(
        "--lease", float, 1, 3600, str(int(SERVER.lease_s)),
        "seconds a replica's leases last unrenewed: a dead replica's work waits that long "
        "before another replica takes it (default: %(default)s)",
    ))  # fmt: skip
    serve.add_argument(
        "--model",
        default=env("MODEL", None),
        help="the chat model served by default: an id or alias of the catalogue (a --models-dir"
        " model's, a cached Hugging Face repo's), an mlx-lm folder, a .gguf file, or a Hugging"
        " Face repo id to fetch (default: SmolLM2-135M-Instruct)",
    )


def _add_logging(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--log-level",
        type=_log_level,
        default=env("LOG_LEVEL", "info"),
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help="least severe log messages shown",
    )
    serve.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=env("LOG_FORMAT", "text"),
        help="text lines, or one JSON object a line (default: %(default)s)",
    )
    serve.add_argument(
        "--log-file", default=env("LOG_FILE", None), help="write logs there, not to stderr"
    )


def _add_log_keeping(serve: argparse.ArgumentParser) -> None:
    """How the event log is written, what it replays and keeps, and how a stop ends."""
    serve.add_argument(
        "--synchronous",
        choices=["NORMAL", "FULL"],
        default=(env("SYNCHRONOUS", SERVER.synchronous) or SERVER.synchronous).upper(),
        help="SQLite synchronous mode: FULL makes every commit survive power loss (on"
        " PostgreSQL: FULL waits for each commit's WAL flush, synchronous_commit on)",
    )
    add_switch(serve, "--no-cache", "never answer a chat completion from the replay cache")
    add_switch(
        serve,
        "--no-store-by-default",
        "OpenAI's default: a chat or legacy completion whose request says nothing of"
        " `store` is not kept (purged once read, never replayed); without this flag it is",
    )
    for number in CACHES_AND_QUEUES:
        add_number(serve, number)
    serve.add_argument(
        "--prompt-cache-dir",
        default=env("PROMPT_CACHE_DIR", None),
        metavar="DIR",
        help="the prefix cache's disk tier, which outlives a restart (default: OMNI_HOME/kv)",
    )
    add_number(serve, Number(
        "--prompt-cache-disk-gb", float, 0, BIG, None,
        "most the disk tier holds (default: a tenth of its disk's free space, at most"
        f" {DISK_CAP_GB:g}; 0: no disk tier)"))  # fmt: skip
    serve.add_argument(
        "--retention",
        type=_duration,
        default=env("RETENTION", None),
        metavar="DURATION",
        help="purge responses and completions that ended longer ago (30d, 12h): at start-up,"
        " then hourly (default: keep everything)",
    )
    add_number(serve, SHUTDOWN_GRACE)


def _add_runtime(serve: argparse.ArgumentParser) -> None:
    """How the engine runs the model on a CPU."""
    for flag, parse, default, metavar, help_ in (
        ("--blas", _blas, ENGINE.blas, "auto|bundled|PATH",
         "the BLAS under the engine's matrix products on Linux with MLX's CPU build: auto:"
         " an installed OpenBLAS, else MLX's bundled reference BLAS; or a library's path"),
        ("--weights", _weights, ENGINE.weights, "auto|stored|float32",
         "the weights' format in the engine: auto: float32 for a small model on a CPU with"
         " an optimized BLAS (several times faster there), else as stored"),
    ):  # fmt: skip
        name = flag.removeprefix("--").upper()
        serve.add_argument(
            flag, type=parse, default=env(name, default), metavar=metavar, help=help_
        )
    _add_ranks(serve)


def _add_ranks(serve: argparse.ArgumentParser) -> None:
    """A model sharded over ranks that MLX's launcher starts (docs/distributed.md)."""
    add_number(serve, Number(
        "--ranks", int, 1, 1024, "1",
        "shard the chat model over this many ranks on this machine (MLX's launcher starts"
        " them; 1: none)"))  # fmt: skip
    serve.add_argument(
        "--hostfile",
        default=env("HOSTFILE", None),
        metavar="PATH",
        help="shard it over the hosts of this MLX host file (mlx.launch's; its first host is"
        " this machine: rank 0 runs beside the server)",
    )
    serve.add_argument(
        "--distributed-backend",
        choices=("ring", "jaccl", "jaccl-ring", "mpi", "nccl"),
        default=env("DISTRIBUTED_BACKEND", None),
        help="MLX's backend between the ranks: ring (TCP), jaccl (Thunderbolt RDMA between"
        " Macs), mpi, nccl (NVIDIA GPUs) (default: as MLX's launcher picks: the host file's,"
        " else nccl where CUDA is, else ring)",
    )
    add_number(serve, Number(
        "--rank-timeout", float, 1, 86_400, str(Ranks.timeout_s),
        "seconds the ranks may go without a step's output while work runs; past it a rank"
        " or a link is taken for stopped, and the ranks start again (default: 120)"))  # fmt: skip
    serve.add_argument(
        "--sharding",
        choices=("tensor", "pipeline"),
        default=env("SHARDING", Ranks.sharding),
        help="how the ranks split the model: each layer's weights (tensor) or the layers"
        " (pipeline), as mlx-lm's model supports it (default: %(default)s)",
    )


def _add_access(serve: argparse.ArgumentParser) -> None:
    """Who may reach the server: API keys, host names, web origins, body size, image URLs."""
    _add_list(serve, "--api-key", "API_KEY", "KEY",
              "a key clients must send as 'Authorization: Bearer KEY' (repeatable; "
              "OMNI_API_KEY: comma-separated)")  # fmt: skip
    serve.add_argument(
        "--api-key-file",
        default=env("API_KEY_FILE", None),
        metavar="PATH",
        help="a file of keys, one a line, optionally 'name:key' (the name is what the log records)",
    )
    add_switch(
        serve,
        "--allow-no-auth",
        "serve a non-loopback address without API keys (anyone who reaches it may use it)",
    )
    _add_list(serve, "--allowed-origins", "ALLOWED_ORIGINS", "ORIGIN",
              "web origins whose pages may call the API (CORS), comma-separated or repeated; "
              "'*': any (default: none)")  # fmt: skip
    _add_list(serve, "--allowed-hosts", "ALLOWED_HOSTS", "HOST",
              "host names the server answers to beyond its own names and IP addresses "
              "(e.g. omni.example.com, *.example.com, '*': any)")  # fmt: skip
    add_number(serve, Number(
        "--max-body-mb", float, 0.001, 1e6, "16", "largest request body, in MB (413 beyond)"
    ))  # fmt: skip
    add_switch(
        serve,
        "--no-image-urls",
        "fetch no http(s) image URL a request names (images come as data: URLs only): "
        "clients cannot make the server reach other hosts",
    )
    _add_list(serve, "--allow-image-hosts", "ALLOW_IMAGE_HOSTS", "HOST|CIDR",
              "hosts (images.lan, *.lan) or networks (10.1.0.0/16, 127.0.0.1) that image URLs "
              "may name although not public (repeatable or comma-separated; default: public "
              "addresses only)")  # fmt: skip
    add_number(serve, IMAGE_FETCH_TIMEOUT)


def _add_list(
    serve: argparse.ArgumentParser, flag: str, name: str, metavar: str, help: str
) -> None:
    """A repeatable flag whose OMNI_<name> default is a comma-separated list."""
    serve.add_argument(
        flag, action="append", default=listed(env(name, "")), metavar=metavar, help=help
    )


def _add_defaults(serve: argparse.ArgumentParser) -> None:
    """What a request gets for the sampling settings it leaves out (as mlx-lm's server); each
    unset by default: the model's own recommendation (its generation_config.json), else 1."""
    for number in SAMPLING:
        add_number(serve, number)
    serve.add_argument(
        "--chat-template-args",
        type=_template_args,
        default=env("CHAT_TEMPLATE_ARGS", "{}"),  # argparse parses a string default too
        metavar="JSON",
        help="a JSON object passed to the chat template, e.g. '{\"enable_thinking\": false}'",
    )


def _duration(text: str) -> float:
    from omni.events.maintenance import parse_duration

    value: float = parsed(parse_duration, " (the flag or OMNI_RETENTION)")(text)
    return value


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
