"""What /metrics reports: one registry per app (tests build many apps in one process), and the
metric objects the writer, the runs and the API observe. Observed once per commit or per
generation, never per token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Seconds: a tiny model on a CPU answers in milliseconds, a big one's first token under load
# takes seconds.
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PER_TOKEN = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
COMMIT = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Seconds of a request on audio: a sentence takes a second, an hour of recording minutes.
AUDIO = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        count, spread = self._counter, self._histogram
        self.requests = count(
            "omni_http_requests",
            "HTTP requests answered, by route (the URL rule), method and status",
            "route", "method", "status",
        )  # fmt: skip
        self.input_tokens = count(
            "omni_input_tokens", "Prompt tokens of finished generations", "api"
        )
        self.output_tokens = count(
            "omni_output_tokens", "Tokens generated (replays not counted)", "api"
        )
        self.reused_tokens = count(
            "omni_prefix_cache_reused_tokens",
            "Prompt tokens taken from the prefix (KV) cache instead of prefilled, by the tier"
            " that gave them (memory, disk)",
            "api", "tier",
        )  # fmt: skip
        self.prefix_lookups = count(
            "omni_prefix_cache_lookups",
            "Generations by what the prefix cache gave their prompt: a prefix from memory, one"
            " from disk, or nothing (miss)",
            "api", "result",
        )  # fmt: skip
        self.prefix_bytes = Gauge(
            "omni_prefix_cache_bytes",
            "What the prefix cache holds, by tier (memory: as the last generation of each model"
            " ended; disk: its folder, at scrape time)",
            ["tier"],
            registry=self.registry,
        )
        self.held: dict[str, int] = {}  # each model's memory tier, as its last job ended
        self.generations = count(
            "omni_generations", "Generations ended, by finish reason", "api", "reason"
        )
        self.first_token = spread(
            "omni_time_to_first_token_seconds",
            "From a generation's submission to its first token",
            LATENCY,
            "api",
        )
        self.per_token = spread(
            "omni_time_per_output_token_seconds",
            "A generation's mean time between output tokens after the first",
            PER_TOKEN,
            "api",
        )
        self.replay_cache = count(
            "omni_replay_cache_requests",
            "Cacheable chat completions, by result (hit: replayed from the log)",
            "result",
        )
        self.events = count("omni_events_appended", "Events committed to the log")
        self.commit = spread(
            "omni_commit_seconds", "Time of one group commit (one transaction)", COMMIT
        )
        self.batch = spread(
            "omni_batch_size", "Jobs that got a token in one engine step (the decode batch)", BATCH
        )
        self.embedding_inputs = count(
            "omni_embeddings_inputs", "Inputs embedded (strings or token lists)"
        )
        self.embedding_seconds = spread(
            "omni_embeddings_request_seconds",
            "From an embeddings request's arrival to its vectors (a model's load included)",
            LATENCY,
        )
        self.transcriptions = count(
            "omni_transcriptions",
            "Transcriptions and translations ended, by task and status (completed, failed,"
            " cancelled: its client went away)",
            "task", "status",
        )  # fmt: skip
        self.transcription_audio = count(
            "omni_transcription_audio_seconds",
            "Seconds of audio the transcription models heard",
            "task",
        )
        self.transcription_seconds = spread(
            "omni_transcription_request_seconds",
            "From a transcription's acceptance to its ending",
            AUDIO,
            "task",
        )
        self.speeches = count(
            "omni_speech_requests",
            "Speech requests ended, by status (completed, failed, cancelled: its client went away)",
            "status",
        )
        self.speech_audio = count(
            "omni_speech_audio_seconds", "Seconds of audio the speech models spoke"
        )
        self.speech_seconds = spread(
            "omni_speech_request_seconds",
            "From a speech request's acceptance to its ending (its last audio, or its model"
            " stopping)",
            AUDIO,
        )
        self.queued = Gauge(
            "omni_jobs_queued", "Jobs waiting for the model", registry=self.registry
        )
        self.running = Gauge(
            "omni_jobs_running", "Jobs the model is working on", registry=self.registry
        )
        self.prefill = Gauge(
            "omni_prefill_tokens",
            "Long prompts being prefilled now, by model: their tokens fed so far (fed) and in"
            " all (total)",
            ["model", "state"],
            registry=self.registry,
        )
        self._prefilling: dict[str, tuple[str, int, int]] = {}
        self.ranks = Gauge(
            "omni_engine_ranks",
            "The ranks each chat model is sharded over (omni serve --ranks), by MLX's backend"
            " and the sharding",
            ["backend", "sharding"],
            registry=self.registry,
        )
        for outcome in ("hit", "miss"):  # both series exist from the start, at 0
            self.replay_cache.labels(outcome)

    def prefilling(self, run: str, model: str, fed: int | None, total: int = 0) -> None:
        """A long prompt's progress (`fed` of `total`); None: its prefill is over."""
        if fed is None:
            if self._prefilling.pop(run, None) is None:
                return
        else:
            self._prefilling[run] = (model, fed, total)
        sums: dict[str, list[int]] = {model: [0, 0]}
        for m, f, t in self._prefilling.values():
            at = sums.setdefault(m, [0, 0])
            at[0], at[1] = at[0] + f, at[1] + t
        for m, (f, t) in sums.items():
            self.prefill.labels(m, "fed").set(f)
            self.prefill.labels(m, "total").set(t)

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def _histogram(
        self, name: str, doc: str, buckets: tuple[float, ...], *labels: str
    ) -> Histogram:
        return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

    def watch(
        self,
        queued: Callable[[], float],
        running: Callable[[], float],
        on_disk: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """Gauges read at scrape time."""
        self.queued.set_function(queued)
        self.running.set_function(running)
        self.prefix_bytes.labels("memory").set_function(lambda: sum(self.held.values()))
        self.prefix_bytes.labels("disk").set_function(on_disk)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def folder_bytes(root: str | None) -> int:
    """What a prefix-cache disk tier's folder holds (omni.runtime.chat.kv_files: a folder per
    model key, an entry's tensors in a .safetensors file), in bytes."""
    if root is None:
        return 0
    total = 0
    for path in Path(root).glob("*/*.safetensors"):
        try:
            total += path.stat().st_size
        except OSError:  # removed meanwhile (an eviction, another server)
            continue
    return total


# For writers built without a server (tests, tools): observations go nowhere anyone reads.
UNREAD = Metrics()
