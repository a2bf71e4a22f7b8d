"""Jobs and what they output: the values that cross between the service and a runtime (the
engine, in a process of its own), and the Engine protocol a runtime implements."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from omni.protocol.tool_calls import ToolFormat

FinishReason = Literal["stop", "length", "cancelled"]
T_co = TypeVar("T_co", covariant=True)


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


@dataclass(frozen=True, slots=True)
class Failed:
    message: str


Output = Started | Delta | Finished | Failed


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
    # {"type": "json_object"} (omni.protocol.grammar).
    constraint: dict[str, Any] | None = None
    # Other requests the server was still taking in as this one's job left for the engine.
    behind: int = 0
    # The images (encoded files, in prompt order) that the prompt's image tokens stand for:
    # a vision model's engine turns them into its vision tower's input.
    images: tuple[bytes, ...] = ()
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


class Engine(Protocol):
    """What the service needs from a model runner."""

    model_id: str
    # Told how many jobs got a token in each decode step (/metrics); None: nobody asks.
    on_step: Callable[[int], None] | None

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def queued(self) -> int:
        """Jobs submitted but not yet decoding."""
        ...

    @property
    def running(self) -> int:
        """Jobs taken and not yet ended."""
        ...

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        thinking: bool | None = None,
    ) -> list[int]:
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

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EmbeddingCapabilities:
    """What a loaded embedding model can do."""

    dimensions: int  # the length of its vectors
    context_length: int  # the most tokens of one input
    vocab_size: int = 0  # token ids given as input are below this (0: not known, not checked)


@dataclass(frozen=True, slots=True)
class SpeechCapabilities:
    """What a loaded speech model can do."""

    sample_rate: int  # of the audio it speaks
    voices: tuple[str, ...]  # the voices it has; empty: it names none (any is passed on)
    default_voice: str | None
    instructions: bool  # whether it takes instructions on how to speak


@dataclass(frozen=True, slots=True)
class Spoken:
    """How much a speech request spoke: the last thing Speaker.speak yields."""

    samples: int
    sample_rate: int
    input_tokens: int  # what the model read (Kokoro: phonemes)
    segments: int = 0  # the model's pieces (Kokoro: sentences or lines)
    cancelled: bool = False  # stopped by cancel() before the model was done

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0


class Answer(Protocol[T_co]):
    """A model's answer as it comes, from a process that does one request at a time: an
    async iterator whose cancel() asks the model to stop at its next piece (what it sent
    already still comes, then its last value, which says it was cancelled)."""

    def __aiter__(self) -> Answer[T_co]: ...

    async def __anext__(self) -> T_co: ...

    def cancel(self) -> None: ...

    async def aclose(self) -> None:
        """Stop reading (cancelling the request if it is not over)."""
        ...


# isinstance against a runtime-checkable Protocol looks up each of its members every time (a
# few µs, on every request's way in): the answer is kept per class and protocol.
_KEEPS: dict[tuple[type, type], bool] = {}


def keeps(model: object, protocol: type) -> bool:
    """isinstance(model, protocol) for one of the runtime-checkable protocols below."""
    key = (type(model), protocol)
    known = _KEEPS.get(key)
    if known is None:
        known = _KEEPS[key] = isinstance(model, protocol)
    return known


@runtime_checkable
class Warming(Protocol):
    """A model handed over while its weights still load (jobs submitted meanwhile wait)."""

    @property
    def loading(self) -> bool: ...

    @property
    def load_error(self) -> str | None:
        """Why its weights could not be loaded, once that is known."""
        ...


@runtime_checkable
class Measured(Protocol):
    """A model that knows what its weights take in memory (float32 unpacking, quantization):
    what the pool counts against its memory budget, in place of the size on disk."""

    @property
    def memory_bytes(self) -> int | None:
        """None until its weights are loaded."""
        ...


@runtime_checkable
class Stored(Protocol):
    """A model loaded from a folder or a file on disk (a default: where it was fetched to), or
    from a repo id: what the pool measures, where it reports nothing in memory itself."""

    @property
    def path(self) -> str: ...


class Embedder(Protocol):
    """What the service needs from an embedding model's runner (omni.runtime.embeddings.engine)."""

    model_id: str

    @property
    def capabilities(self) -> EmbeddingCapabilities: ...

    @property
    def running(self) -> int:
        """Batches being embedded now (a model with any is never evicted)."""
        ...

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Each text's tokens, special tokens included, not truncated."""
        ...

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One unit vector (L2-normalized, pooled as the model was trained) per input,
        in order; inputs are batched into passes of the model by the runner."""
        ...

    def close(self) -> None: ...


class Speaker(Protocol):
    """What the service needs from a speech model's runner (omni.runtime.speech.engine)."""

    model_id: str

    @property
    def capabilities(self) -> SpeechCapabilities: ...

    @property
    def running(self) -> int:
        """Requests being spoken or waiting to be (a model with any is never evicted)."""
        ...

    async def speak(
        self,
        text: str,
        voice: str | None,
        response_format: str,
        speed: float,
        instructions: str | None = None,
    ) -> Answer[bytes | Spoken]:
        """Sent to the model: the encoded audio's pieces as they are spoken, then one
        Spoken."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ImageCapabilities:
    """What a loaded image generation model can do."""

    default_steps: int  # the denoising steps it is made to take (medium quality)


@dataclass(frozen=True, slots=True)
class ImageOrder:
    """What one image generation request asks of the model."""

    prompt: str
    n: int
    width: int
    height: int
    steps: int
    seed: int  # the first image's; the next ones take seed + 1, seed + 2, ...
    output_format: str  # png, jpeg or webp
    compression: int  # 0-100 (jpeg, webp)
    partial_images: int  # 0-3 of each image


@dataclass(frozen=True, slots=True)
class PartialPicture:
    """An image on its way, decoded from its latents at an intermediate step."""

    image: int  # which of the request's n
    index: int  # 0-based, within its image
    data: bytes  # encoded as the request asked


@dataclass(frozen=True, slots=True)
class Picture:
    """One image drawn, and what it took (OpenAI's usage of one image)."""

    image: int
    seed: int
    data: bytes
    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches it took


@dataclass(frozen=True, slots=True)
class Drawn:
    """How much an image request took: the last thing Imager.draw yields."""

    input_tokens: int  # the prompt's, as the text encoder read it
    output_tokens: int  # the latent patches made, for all n


class Imager(Protocol):
    """What the service needs from an image generation model's runner
    (omni.runtime.images.engine)."""

    model_id: str

    @property
    def capabilities(self) -> ImageCapabilities: ...

    @property
    def running(self) -> int:
        """Requests being drawn or waiting to be (a model with any is never evicted)."""
        ...

    def draw(self, order: ImageOrder) -> AsyncIterator[PartialPicture | Picture | Drawn]:
        """Each image's partial pictures then the picture, in order, then one Drawn."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Audio:
    """An upload decoded to what Whisper hears."""

    samples: bytes  # little-endian float32, mono, 16 kHz
    format: str  # the container FFmpeg found ("wav", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", …)
    seconds: float


@dataclass(frozen=True)
class TranscribeOptions:
    language: str | None = None  # ISO-639-1; None: detected (English for an .en model)
    prompt: str | None = None  # Whisper's initial prompt
    temperature: float | None = None  # None or 0: Whisper's fallback from 0 upwards
    translate: bool = False  # into English
    words: bool = False  # word timestamps


@dataclass(frozen=True)
class Heard:
    """One window of a recording heard (Whisper's 30 s): its segments with text, in the
    shape of Transcript's, and the seconds of audio heard so far."""

    window: int  # 0, 1, …
    segments: list[dict[str, Any]]
    seconds: float


@dataclass(frozen=True)
class Transcript:
    """A whole recording heard (after its windows): {text, language, segments: [{id, seek,
    start, end, text, tokens, temperature, avg_logprob, compression_ratio, no_speech_prob,
    words?}]}, as mlx-audio's Whisper gives it. `cancelled`: stopped after `windows`."""

    result: dict[str, Any]
    windows: int
    cancelled: bool = False


class Transcriber(Protocol):
    """What the service needs from a speech-to-text model's runner
    (omni.runtime.transcription.engine)."""

    model_id: str

    @property
    def running(self) -> int:
        """Recordings being transcribed now (a model with any is never evicted)."""
        ...

    def decode(self, data: bytes, filename: str) -> Audio:
        """An uploaded file's audio (blocking: run in a thread); an InvalidRequest naming
        `file` for what holds none."""
        ...

    async def transcribe(
        self, audio: Audio, options: TranscribeOptions
    ) -> Answer[Heard | Transcript]:
        """Sent to the model: each window as it is heard, then the Transcript (a failure
        raises OmniError)."""
        ...

    def close(self) -> None: ...
