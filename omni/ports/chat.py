"""What the chat service may ask of a chat model's engine: prompts rendered through its
template, jobs submitted (omni.ports.jobs), and what the model can do (Capabilities)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from omni.ports.jobs import Job
from omni.ports.model import Model

Messages = list[dict[str, Any]]  # a chat, as its template takes it
Tools = list[dict[str, Any]]  # the tools offered, as the template takes them


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How a model writes calls: between `start` and `end` markers, read by `parser`
    (mlx-lm's, for the model's family); no markers: plain JSON (omni.tools.calls)."""

    start: str | None = None
    end: str | None = None
    parser: Callable[[str, Any], Any] | None = None
    family: str | None = None  # mlx-lm's parser module ("qwen3_coder", ...), None: plain JSON


@dataclass(frozen=True, slots=True)
class RecommendedSampling:
    """The sampling a model's makers recommend (its generation_config.json): what a request
    that sets none of these gets, unless the operator chose otherwise. None: no advice."""

    temperature: float | None = None  # 0: greedy (do_sample false)
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a loaded model can do: the service reads this, never probes the engine. The
    defaults are a plain model (no tools in its template, plain JSON calls, no thinking)."""

    context_length: int
    max_token_bytes: int = 1  # the most bytes one token stands for: prompts too long fail early
    template_tools: bool = False  # the chat template renders tools (and calls, results) itself
    tool_format: ToolFormat = ToolFormat()  # how the model writes calls
    thinking: tuple[str, str] | None = None  # the think block's markers, for a reasoning model
    vision: bool = False  # it takes images (a vision-language model: omni.runtime.vision.engine)
    sampling: RecommendedSampling = RecommendedSampling()  # its makers' recommended sampling


class Engine(Model, Protocol):
    """What the service needs from a chat model's engine (omni.runtime.chat.engine)."""

    # Told how many jobs got a token in each decode step (/metrics); None: nobody asks.
    on_step: Callable[[int], None] | None

    @property
    def capabilities(self) -> Capabilities: ...

    def render(self, messages: Messages, tools: Tools, thinking: bool | None = None) -> list[int]:
        """Prompt tokens for a chat, through the model's chat template (`thinking`: the
        template's thinking switch, None its default)."""
        ...

    def opens_thinking(self, prompt: list[int]) -> bool:
        """The template opened the think block at the end of `prompt` (reasoning models)."""
        ...

    def segments(self, tokens: list[int]) -> list[str]:
        """Each token's text as a stream delivers it."""
        ...

    def encode(self, text: str) -> list[int]:
        """Prompt tokens for raw text, without a chat template."""
        ...

    def submit(self, job: Job) -> None: ...
