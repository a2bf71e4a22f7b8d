"""Whisper heard one 30-second window at a time: the loop of mlx-audio's Model.generate
(itself openai-whisper's transcribe), with the options Omni uses, as a generator that
yields each window's segments as soon as they are decoded. generate() has no per-window
hook, so a stream would otherwise get its whole text at the end. The decoding, the timing
of words and the model are mlx-audio's own; only the loop over windows lives here."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_audio.stt.models.whisper.audio import (
    FRAMES_PER_SECOND,
    HOP_LENGTH,
    N_FRAMES,
    SAMPLE_RATE,
    pad_or_trim,
)
from mlx_audio.stt.models.whisper.decoding import DecodingOptions, DecodingResult
from mlx_audio.stt.models.whisper.timing import add_word_timestamps
from mlx_audio.stt.models.whisper.whisper import _get_end

# generate()'s defaults, which Omni keeps.
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6


@dataclass(frozen=True)
class Hearing:
    """How to hear one recording (what generate() is given)."""

    language: str | None  # None: detected from the first window
    task: str  # "transcribe" or "translate"
    temperatures: tuple[float, ...]  # tried in turn while a window's decoding fails
    prompt: str | None
    words: bool
    fp16: bool


@dataclass(frozen=True)
class Window:
    """One window's segments (generate()'s dicts, ids counted over the recording), the
    seconds of audio heard once it is, and whether it was the last."""

    language: str
    segments: list[dict[str, Any]]
    seconds: float
    last: bool


def windows(model: Any, audio: mx.array, hearing: Hearing) -> Generator[Window, None, None]:
    """The recording's windows in order; their segments, joined, are generate()'s."""
    mel, content_frames = model._prepare_audio(audio)
    language = model._detect_language(mel, language=hearing.language)
    tokenizer = model.get_tokenizer(language=language, task=hearing.task)
    base = {"fp16": hearing.fp16, "without_timestamps": False, "language": language,
            "task": hearing.task}  # fmt: skip
    input_stride = N_FRAMES // model.dims.n_audio_ctx  # mel frames per output token: 2
    time_precision = input_stride * HOP_LENGTH / SAMPLE_RATE  # seconds per token: 0.02
    all_tokens: list[int] = []
    prompt_reset_since = 0
    if hearing.prompt is not None:
        all_tokens.extend(tokenizer.encode(" " + hearing.prompt.strip()))
    seek, count, last_speech_timestamp = 0, 0, 0.0
    try:
        while seek < content_frames:
            time_offset = float(seek * HOP_LENGTH / SAMPLE_RATE)  # where the window starts
            segment_size = min(N_FRAMES, content_frames - seek)
            mel_segment = pad_or_trim(mel[seek : seek + segment_size], N_FRAMES, axis=-2)
            mel_segment = mel_segment.astype(model.dtype)
            prompt = all_tokens[prompt_reset_since:]
            result = _decode(model, mel_segment, {**base, "prompt": prompt}, hearing)
            tokens = np.array(result.tokens)
            if result.no_speech_prob > NO_SPEECH_THRESHOLD and not (
                result.avg_logprob > LOGPROB_THRESHOLD
            ):
                seek += segment_size  # silence: on to the next window
                yield Window(
                    language, [], _seconds(min(seek, content_frames)), seek >= content_frames
                )
                continue

            current, seek, single_timestamp_ending = _split(
                tokens, tokenizer, result, seek, segment_size, time_precision, input_stride
            )
            if hearing.words:
                words = (model, tokenizer, mel_segment, segment_size)
                seek, last_speech_timestamp = _words(
                    current, words, last_speech_timestamp, time_offset, seek,
                    single_timestamp_ending,
                )  # fmt: skip

            for segment in current:  # instantaneous or without text: emptied
                if segment["start"] == segment["end"] or segment["text"].strip() == "":
                    segment["text"], segment["tokens"], segment["words"] = "", [], []
            numbered = [{"id": i, **s} for i, s in enumerate(current, start=count)]
            count += len(numbered)
            all_tokens.extend(t for s in current for t in s["tokens"])
            if result.temperature > 0.5:  # a hot window's text does not prompt the next
                prompt_reset_since = len(all_tokens)
            end = min(seek, content_frames)
            yield Window(language, numbered, _seconds(end), seek >= content_frames)
    finally:
        mx.clear_cache()


def _words(
    current: list[dict[str, Any]],
    window: tuple[Any, Any, mx.array, int],
    last_speech: float,
    start: float,
    seek: int,
    single_timestamp_ending: bool,
) -> tuple[int, float]:
    """Word timestamps into the window's segments (`window`: the model, the tokenizer, the
    window's mel and its frames); where the window did not end on a single timestamp, the next
    starts after its last word. The seek and the end of the last speech, as they now are."""
    model, tokenizer, mel, frames = window
    add_word_timestamps(
        segments=current,
        model=model,
        tokenizer=tokenizer,
        mel=mel,
        num_frames=frames,
        last_speech_timestamp=last_speech,
    )
    if not single_timestamp_ending:
        last_word_end = _get_end(current)
        if last_word_end is not None and last_word_end > start:
            seek = round(last_word_end * FRAMES_PER_SECOND)
    last_word_end = _get_end(current)
    if last_word_end is not None:
        last_speech = last_word_end
    return seek, last_speech


def _seconds(frames: int) -> float:
    return float(frames * HOP_LENGTH / SAMPLE_RATE)


def _split(
    tokens: np.ndarray,
    tokenizer: Any,
    result: DecodingResult,
    seek: int,
    size: int,
    time_precision: float,
    input_stride: int,
) -> tuple[list[dict[str, Any]], int, bool]:
    """A window's tokens as segments (cut where two timestamps meet), the seek after it, and
    whether it ended on a single timestamp (no speech after it)."""
    time_offset = float(seek * HOP_LENGTH / SAMPLE_RATE)

    def segment(start: float, end: float, tokens: np.ndarray) -> dict[str, Any]:
        listed = tokens.tolist()
        return {
            "seek": seek,
            "start": float(start),
            "end": float(end),
            "text": tokenizer.decode([t for t in listed if t < tokenizer.eot]),
            "tokens": listed,
            "temperature": result.temperature,
            "avg_logprob": result.avg_logprob,
            "compression_ratio": result.compression_ratio,
            "no_speech_prob": result.no_speech_prob,
        }

    out: list[dict[str, Any]] = []
    timestamp_tokens = tokens >= tokenizer.timestamp_begin
    single_ending = timestamp_tokens[-2:].tolist() == [False, True]
    consecutive = np.where(timestamp_tokens[:-1] & timestamp_tokens[1:])[0] + 1
    if len(consecutive) > 0:
        slices = consecutive.tolist()
        if single_ending:
            slices.append(len(tokens))
        last_slice = 0
        for current_slice in slices:
            sliced = tokens[last_slice:current_slice]
            start = sliced[0].item() - tokenizer.timestamp_begin
            end = sliced[-1].item() - tokenizer.timestamp_begin
            out.append(
                segment(time_offset + start * time_precision,
                        time_offset + end * time_precision, sliced)
            )  # fmt: skip
            last_slice = current_slice
        if single_ending:
            return out, seek + size, True
        # The last segment is unfinished: the next window starts with it.
        last = tokens[last_slice - 1].item() - tokenizer.timestamp_begin
        return out, seek + last * input_stride, False
    duration = size * HOP_LENGTH / SAMPLE_RATE
    timestamps = tokens[timestamp_tokens.nonzero()[0]]
    if len(timestamps) > 0 and timestamps[-1].item() != tokenizer.timestamp_begin:
        duration = (timestamps[-1].item() - tokenizer.timestamp_begin) * time_precision
    out.append(segment(time_offset, time_offset + duration, tokens))
    return out, seek + size, single_ending


def _decode(model: Any, mel: mx.array, options: dict[str, Any], hearing: Hearing) -> DecodingResult:
    """generate()'s decode_with_fallback: hotter until the text is neither too repetitive
    nor too improbable (or is silence)."""
    result: DecodingResult | None = None
    for t in hearing.temperatures:
        result = model.decode(mel, DecodingOptions(**options, temperature=t))
        too_repetitive = result.compression_ratio > COMPRESSION_RATIO_THRESHOLD
        improbable = result.avg_logprob < LOGPROB_THRESHOLD
        silent = result.no_speech_prob > NO_SPEECH_THRESHOLD and improbable
        if silent or not (too_repetitive or improbable):
            break
    assert result is not None
    return result
