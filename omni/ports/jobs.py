"""A generation job and what it outputs: the values that cross between the chat service and
a chat model's engine (omni.ports.chat), which the protocol's recorders turn into events."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal

FinishReason = Literal["stop", "length", "cancelled"]


def fields_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A frozen dataclass's fields in order, as one tuple: what it pickles as (__reduce__)."""
    return attrgetter(*(f.name for f in fields(cls)))  # more than one field: a tuple


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int | None = None
    logprobs: int | None = None  # None: none; k >= 0: the chosen token's and the top k
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    thinking_budget: int | None = None  # most tokens inside a think block, then it is closed

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sampling, _fields_of(self))  # see wire.Spec.__reduce__


_fields_of = fields_getter(Sampling)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token as text and UTF-8 bytes, with its log probability."""

    token: str
    bytes: tuple[int, ...]
    logprob: float


@dataclass(frozen=True, slots=True)
class Logprobs:
    chosen: TokenLogprob
    top: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class Started:
    """The engine took the job off its queue (a queued response is now in progress)."""


@dataclass(frozen=True, slots=True)
class Prefilled:
    """A long prompt's progress: `fed` of its `total` tokens are in the model's cache (a
    reused prefix counted). Said after each chunk of a prompt longer than one."""

    fed: int
    total: int


@dataclass(frozen=True, slots=True)
class Delta:
    """One generated token and the text it completed (often "", e.g. half a character).
    `token` is None for text flushed at the end that belongs to no new token."""

    text: str
    token: int | None
    logprobs: Logprobs | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    disk_tokens: int = 0  # of the cached tokens, those read from the prefix cache's disk tier
    cache_bytes: int = 0  # what the prefix cache's memory tier held as it ended (/metrics)


@dataclass(frozen=True, slots=True)
class Failed:
    message: str
    crashed: bool = False  # the engine's process (or a rank of it) died under the job


Output = Started | Prefilled | Delta | Finished | Failed


@dataclass(eq=False)
class Job:
    """One generation. The engine pushes outputs; Finished or Failed always ends it."""

    prompt: list[int]
    sampling: Sampling
    # Tokens already generated (and recorded) before a restart: generation carries on after them.
    resume_tokens: list[int] = field(default_factory=list)
    # Prefix-cache namespace (the request's prompt_cache_key): conversations stay apart.
    cache_namespace: str = ""
    # A grammar the output must follow: {"type": "json_schema", "schema": {...}} or
    # {"type": "json_object"} (omni.tools.grammar).
    constraint: dict[str, Any] | None = None
    # Other requests the server was still taking in as this one's job left for the engine.
    behind: int = 0
    # The images (encoded files, in prompt order) that the prompt's image tokens stand for:
    # a vision model's engine turns them into its vision tower's input.
    images: tuple[bytes, ...] = ()
    # Part of a multi-turn session (a chain, a conversation, a resent history): its prefix is
    # likely asked for again, so its cache outlives one-off prompts' (omni.runtime.chat).
    session: bool = False
    outputs: asyncio.Queue[Output] = field(default_factory=asyncio.Queue)
    stop: threading.Event = field(default_factory=threading.Event)
    _claimed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Set by the engine that took the job: passes a cancel on to where the job runs.
    on_cancel: Callable[[], None] | None = None

    def claim(self) -> bool:
        """The engine takes the job; False if it was cancelled first (then it must not run)."""
        with self._lock:
            self._claimed = not self.stop.is_set()
            return self._claimed

    def cancel(self) -> bool:
        """Ask the job to stop. True if no engine had claimed it: nobody else will end it."""
        with self._lock:
            self.stop.set()
            unclaimed = not self._claimed
        if self.on_cancel is not None:
            self.on_cancel()
        return unclaimed
