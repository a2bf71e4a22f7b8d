"""What crosses the pipe between the server (omni.runtime.chat.engine) and the engine process
(omni.runtime.chat.worker, omni.runtime.chat.scheduler): one value per message, each
side's `match` on its class. A decode step's outputs go back as one message, a list of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni.ports.chat import RecommendedSampling
from omni.ports.jobs import FinishReason, Job, Logprobs, Sampling, fields_getter
from omni.runtime.platform.blas import describe

# The server to the engine.


@dataclass(frozen=True, slots=True)
class Spec:
    """A job to generate for."""

    id: int
    prompt: list[int]
    resume_tokens: list[int]
    cache_namespace: str
    sampling: Sampling
    constraint: dict[str, Any] | None = None  # a grammar the output must follow
    # Other requests the server was still taking in when it sent this one (they are on their
    # way here): an idle engine waits a little for them rather than start this one alone.
    behind: int = 0
    images: tuple[bytes, ...] = ()  # what the prompt's image tokens stand for (vision models)
    session: bool = False  # a multi-turn session's: its cache is kept longer

    @classmethod
    def of(cls, job_id: int, job: Job) -> Spec:
        """The job as the engine is sent it, under `job_id`."""
        return cls(
            job_id,
            job.prompt,
            job.resume_tokens,
            job.cache_namespace,
            job.sampling,
            job.constraint,
            job.behind,
            job.images,
            job.session,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # One a request, pickled on the event loop: its fields as a tuple pickle in half the
        # time of a slotted dataclass's own state (a list built from dataclasses.fields()).
        return (Spec, _spec_fields(self))


_spec_fields = fields_getter(Spec)


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop job `id`: waiting, it leaves the queue; running, it ends at its next step."""

    id: int


@dataclass(frozen=True, slots=True)
class MaxBatch:
    """Decode `size` jobs together at most from now on (more wait, queued)."""

    size: int


@dataclass(frozen=True, slots=True)
class Close:
    """End the engine process (running jobs end where they are)."""


Request = Spec | Cancel | MaxBatch | Close

# The engine to the server, once: the model loaded, or why not.


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the engine process found itself running the model with, once it was loaded."""

    blas: str | None  # the BLAS library MLX's products run on (None: on a GPU, or none)
    weights: str  # "float32", "4/8-bit quantized", ...
    weights_setting: str  # what --weights asked for (auto, stored, float32)
    gemv: bool = False  # one-row products go to the BLAS's sgemv (omni.runtime.platform.gemv)
    memory_bytes: int = 0  # what the weights (a draft model's too) take in memory, as run

    def __str__(self) -> str:
        blas = "" if self.blas is None else f"BLAS {describe(self.blas)}, "
        if self.gemv:
            blas = blas.replace("), ", ") with one-row products as sgemv, ")
        return f"{blas}weights {self.weights} (--weights {self.weights_setting})"


@dataclass(frozen=True, slots=True)
class Loaded:
    context_length: int
    eos: list[int]
    runtime: Runtime
    sampling: RecommendedSampling = RecommendedSampling()  # its generation_config.json's


@dataclass(frozen=True, slots=True)
class LoadFailed:
    """Why the model could not be loaded (the process then exits)."""

    message: str


# The engine to the server: a step's outputs, in a list.


@dataclass(frozen=True, slots=True)
class Started:
    id: int
    reached: bool  # whether it reached the model (not ended before its first step)


@dataclass(frozen=True, slots=True)
class Prefilled:
    """A long prompt's chunk was fed: `fed` of its `total` tokens are in its cache (the
    cached prefix counted)."""

    id: int
    fed: int
    total: int


@dataclass(frozen=True, slots=True)
class Token:
    id: int
    token: int
    logprobs: Logprobs | None = None

    # A step at 64 streams sends 64 of these. Pickled as a class and its fields (not its
    # slots' state, set one by one through the frozen class's __setattr__), a list of 64
    # goes to bytes and back in ~45 µs, not ~190 (tuples: ~8; see the commit that added it).
    def __reduce__(self) -> tuple[type[Token], tuple[int, int, Logprobs | None]]:
        return Token, (self.id, self.token, self.logprobs)


@dataclass(frozen=True, slots=True)
class Finished:
    id: int
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    disk_tokens: int = 0  # of the cached tokens, those the prefix cache's disk tier gave
    cache_bytes: int = 0  # what the prefix cache's memory tier held as the job ended


@dataclass(frozen=True, slots=True)
class Failed:
    id: int
    message: str


Output = Started | Prefilled | Token | Finished | Failed
