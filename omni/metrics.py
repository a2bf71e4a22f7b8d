"""What /metrics reports: one registry per app (tests build many apps in one process), and the
metric objects the writer, the runs and the API observe. Observed once per commit or per
generation, never per token."""

from __future__ import annotations

from collections.abc import Callable

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
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "omni_http_requests",
            "HTTP requests answered, by route (the URL rule), method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.input_tokens = Counter(
            "omni_input_tokens", "Prompt tokens of finished generations", ["api"], registry=r
        )
        self.output_tokens = Counter(
            "omni_output_tokens", "Tokens generated (replays not counted)", ["api"], registry=r
        )
        self.reused_tokens = Counter(
            "omni_prefix_cache_reused_tokens",
            "Prompt tokens taken from the prefix (KV) cache instead of prefilled",
            ["api"],
            registry=r,
        )
        self.generations = Counter(
            "omni_generations", "Generations ended, by finish reason", ["api", "reason"], registry=r
        )
        self.first_token = Histogram(
            "omni_time_to_first_token_seconds",
            "From a generation's submission to its first token",
            ["api"],
            buckets=LATENCY,
            registry=r,
        )
        self.per_token = Histogram(
            "omni_time_per_output_token_seconds",
            "A generation's mean time between output tokens after the first",
            ["api"],
            buckets=PER_TOKEN,
            registry=r,
        )
        self.replay_cache = Counter(
            "omni_replay_cache_requests",
            "Cacheable chat completions, by result (hit: replayed from the log)",
            ["result"],
            registry=r,
        )
        self.events = Counter("omni_events_appended", "Events committed to the log", registry=r)
        self.commit = Histogram(
            "omni_commit_seconds",
            "Time of one group commit (one transaction)",
            buckets=COMMIT,
            registry=r,
        )
        self.batch = Histogram(
            "omni_batch_size",
            "Jobs that got a token in one engine step (the decode batch)",
            buckets=BATCH,
            registry=r,
        )
        self.embedding_inputs = Counter(
            "omni_embeddings_inputs", "Inputs embedded (strings or token lists)", registry=r
        )
        self.embedding_seconds = Histogram(
            "omni_embeddings_request_seconds",
            "From an embeddings request's arrival to its vectors (a model's load included)",
            buckets=LATENCY,
            registry=r,
        )
        self.transcriptions = Counter(
            "omni_transcriptions",
            "Transcriptions and translations ended, by task and status (completed, failed,"
            " cancelled: its client went away)",
            ["task", "status"],
            registry=r,
        )
        self.transcription_audio = Counter(
            "omni_transcription_audio_seconds",
            "Seconds of audio the transcription models heard",
            ["task"],
            registry=r,
        )
        self.transcription_seconds = Histogram(
            "omni_transcription_request_seconds",
            "From a transcription's acceptance to its ending",
            ["task"],
            buckets=AUDIO,
            registry=r,
        )
        self.speeches = Counter(
            "omni_speech_requests",
            "Speech requests ended, by status (completed, failed, cancelled: its client went away)",
            ["status"],
            registry=r,
        )
        self.speech_audio = Counter(
            "omni_speech_audio_seconds", "Seconds of audio the speech models spoke", registry=r
        )
        self.speech_seconds = Histogram(
            "omni_speech_request_seconds",
            "From a speech request's acceptance to its ending (its last audio, or its model"
            " stopping)",
            buckets=AUDIO,
            registry=r,
        )
        self.queued = Gauge("omni_jobs_queued", "Jobs waiting for the model", registry=r)
        self.running = Gauge("omni_jobs_running", "Jobs the model is working on", registry=r)
        for outcome in ("hit", "miss"):  # both series exist from the start, at 0
            self.replay_cache.labels(outcome)

    def watch(self, queued: Callable[[], float], running: Callable[[], float]) -> None:
        """Gauges read at scrape time."""
        self.queued.set_function(queued)
        self.running.set_function(running)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# For writers built without a server (tests, tools): observations go nowhere anyone reads.
UNREAD = Metrics()
