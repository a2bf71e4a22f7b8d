"""What a server runs with: the server's part (the app and its services) and the engine's (the
model's process). `omni serve` builds both from its flags and the environment; every default
is here, once. Frozen, not slotted: a class attribute is its default (`ServerSettings.max_queued`),
which the CLI's help and the services' own parameters read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a leaf: the server's parts are named here, never imported
    from omni.api.gate import Access
    from omni.image_hosts import ImageHosts
    from omni.service.defaults import Defaults


@dataclass(frozen=True)
class ServerSettings:
    db_path: str = "omni.db"
    synchronous: str = "NORMAL"
    keepalive: float = 15.0
    model_aliases: frozenset[str] = field(default_factory=frozenset)
    cache: bool = True
    cache_max_entries: int = 1024
    cache_max_age_s: float = 86400.0
    max_queued: int = 256
    home: str | None = None  # OMNI_HOME: where the reasoning key lives (None: a key per process)
    access: Access | None = None  # keys, hosts, origins, body size (None: Access's own)
    defaults: Defaults | None = None  # sampling a request leaves out (None: Defaults' own)
    retention_s: float | None = None  # purge what ended longer ago than this (None: keep all)
    retention_every_s: float = 3600.0
    shutdown_grace_s: float = 10.0  # for running generations to end, once a stop is asked
    fetch_images: bool = True  # http(s) image URLs are fetched (False: --no-image-urls)
    # A completion whose request says nothing of `store` is kept (False: OpenAI's default,
    # --no-store-by-default).
    store_by_default: bool = True
    # What image URLs may name beyond public addresses (--allow-image-hosts; None: nothing).
    image_hosts: ImageHosts | None = None
    # The longest one image URL's fetch may take, redirects and all (--image-fetch-timeout).
    image_fetch_timeout_s: float = 30.0
    # Servers sharing one log: each leases what it runs (omni.service.leasing). Always on
    # for a PostgreSQL log; SQLite's file has one server (tests share a MemoryStore).
    shared: bool = False
    replica: str | None = None  # this server's name among them (None: host, pid, random)
    lease_s: float = 10.0  # how long a dead server's work waits before another takes it
    # The engines' prefix-cache disk tier (EngineSettings.prompt_cache_dir): /metrics reports it.
    prompt_cache_dir: str | None = None
    ranks: Ranks | None = None  # the chat models' ranks, where they are sharded


@dataclass(frozen=True)
class Ranks:
    """A chat model sharded over ranks that MLX's launcher starts (omni.runtime.chat.ranks):
    how many, where, over which backend, split how; /health, /metrics and the dashboard say
    it too."""

    count: int
    backend: str = "ring"  # MLX's: ring, jaccl, mpi, nccl
    sharding: str = "tensor"  # or pipeline
    hostfile: str | None = None  # an MLX host file (several machines); None: this machine
    hosts: tuple[str, ...] = ()  # its hosts, rank by rank
    # The longest the ranks may go without a step's output while work runs: past it, a rank or
    # a link between them is taken for stopped, and the ranks end as if one had died.
    timeout_s: float = 120.0

    def to_json(self) -> dict[str, object]:
        return {"count": self.count, "backend": self.backend, "sharding": self.sharding}


@dataclass(frozen=True)
class EngineSettings:
    prompt_cache_entries: int = 0  # 0: the prefix cache's memory tier is bounded by bytes alone
    prompt_cache_bytes: int = 4 << 30
    # The prefix cache's disk tier (omni.runtime.chat.kv_disk): its folder (None: none) and
    # the most it may hold.
    prompt_cache_dir: str | None = None
    prompt_cache_disk_bytes: int = 0
    model_id: str = ""  # the engine's model, as the server names it (set as its process starts)
    ranks: Ranks | None = None  # the chat model sharded over ranks (None: whole)
    max_batch: int = 32
    # Extra arguments for every chat-template render (`--chat-template-args`).
    template_args: dict[str, Any] = field(default_factory=dict)
    blas: str = "auto"  # auto, bundled, or a path omni.runtime.platform.blas.loadable passed
    weights: str = "auto"  # auto, stored, float32 (omni.runtime.loading.weights)
    num_draft_tokens: int = 2  # tokens a draft model proposes a step (speculative decoding)
    # For tests and benchmarks, from the environment (engine_knobs):
    prefill_group: int | None = None  # prompts prefilled together (None: the device's)
    prefill_chunk: int | None = None  # prompt tokens a step feeds one prompt (None: the device's)
    gather_s: float = 0.05  # the longest a job waits for others to be prefilled with
    stats: bool = False  # print where the engine process's time went, at exit
    trace: str | None = None  # a file for the engine's step trace


def engine_knobs(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The engine settings tests and benchmarks give through the environment (OMNI_PREFILL_GROUP,
    OMNI_PREFILL_CHUNK, OMNI_GATHER_MS, OMNI_ENGINE_STATS, OMNI_ENGINE_TRACE), as keyword
    arguments of EngineSettings; ValueError names a variable that is set wrong."""
    env = os.environ if env is None else env
    gather_ms = env.get("OMNI_GATHER_MS", "").strip()
    return {
        "prefill_group": _positive(env, "OMNI_PREFILL_GROUP"),
        "prefill_chunk": _positive(env, "OMNI_PREFILL_CHUNK"),
        "gather_s": float(gather_ms) / 1000 if gather_ms else EngineSettings.gather_s,
        "stats": bool(env.get("OMNI_ENGINE_STATS")),
        "trace": env.get("OMNI_ENGINE_TRACE") or None,
    }


def _positive(env: Mapping[str, str], name: str) -> int | None:
    """A positive integer setting of `env`; None where unset (or set but empty)."""
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)
