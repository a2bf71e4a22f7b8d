"""A generation's figures for /metrics, taken once, as its recording ends (omni.service.runs):
how it ended, its tokens, what the prefix cache gave it, its first token's wait and its pace."""

from __future__ import annotations

import time

from omni.metrics import Metrics
from omni.ports.jobs import Failed, Finished, Output
from omni.protocol.recorder import ResponseRecorder
from omni.service.run import Run


def observe(m: Metrics, run: Run, outputs: list[Output]) -> None:
    """A generation's figures for /metrics, once, at its end."""
    end = next((o for o in reversed(outputs) if isinstance(o, Finished | Failed)), None)
    m.prefilling(run.stream_id, run.engine.model_id, None)
    recorder = run.recorder
    api = run.api
    if not isinstance(end, Finished):
        m.generations.labels(api, "failed").inc()
        return
    # A stop sequence ends a generation with a cancel to the engine: it stopped, all the same.
    stopped = not isinstance(recorder, ResponseRecorder) and recorder.wants_stop
    m.generations.labels(api, "stop" if stopped else end.reason).inc()
    generated = end.completion_tokens - len(run.job.resume_tokens)
    m.input_tokens.labels(api).inc(end.prompt_tokens)
    m.output_tokens.labels(api).inc(max(0, generated))
    memory = end.cached_tokens - end.disk_tokens
    m.reused_tokens.labels(api, "memory").inc(memory)
    m.reused_tokens.labels(api, "disk").inc(end.disk_tokens)
    found = "disk" if end.disk_tokens else "memory" if end.cached_tokens else "miss"
    m.prefix_lookups.labels(api, found).inc()
    m.held[run.engine.model_id] = end.cache_bytes
    first = run.first_token_at
    if first is None:
        return
    if not run.job.resume_tokens:  # a restart's first token is not a first token
        m.first_token.labels(api).observe(first - run.submitted_at)
    if generated > 1:
        m.per_token.labels(api).observe((time.perf_counter() - first) / (generated - 1))
