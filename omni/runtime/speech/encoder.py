"""Speech as the bytes of a file: float samples in, a stream of an OpenAI `response_format`
out (mp3, opus, aac, flac, wav, pcm), encoded piece by piece as the model speaks, so the
first bytes leave before the last sentence is spoken. PyAV (FFmpeg, bundled in its wheels)
encodes; wav and pcm are written here. Runs in the speech model's process."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

# (container, codec) for PyAV of the formats it encodes (omni.schemas.speech names them all).
CONTAINERS = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus"),
              "aac": ("adts", "aac"), "flac": ("flac", "flac")}  # fmt: skip
UNKNOWN_SIZE = 0xFFFFFFFF  # a streamed wav's sizes: decoders read its data to the end


def pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as 16-bit signed little-endian PCM (clipped)."""
    clipped = np.clip(samples, -1.0, 1.0)
    return bytes((clipped * 32767.0).astype("<i2").tobytes())


def wav_header(rate: int) -> bytes:
    """A mono 16-bit wav's header whose sizes say 'to the end of the stream'."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVE"
        + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        + b"data" + struct.pack("<I", UNKNOWN_SIZE)
    )  # fmt: skip


class _Sink:
    """Where PyAV writes: a file that cannot seek, read back after each write."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


class Encoder:
    """feed() a piece of samples, get the bytes encoded so far; close() for the rest."""

    def __init__(self, response_format: str, rate: int):
        self.format, self.rate = response_format, rate
        self._started = False
        self._av: _AVStream | None = None
        if response_format in CONTAINERS:
            self._av = _AVStream(response_format, rate)

    def feed(self, samples: np.ndarray) -> bytes:
        samples = np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0)  # a model's NaN: silence
        if self._av is not None:
            return self._av.feed(samples)
        head = b""
        if self.format == "wav" and not self._started:
            head = wav_header(self.rate)
        self._started = True
        return head + pcm16(samples)

    def close(self) -> bytes:
        if self._av is not None:
            return self._av.close()
        return b"" if self._started or self.format == "pcm" else wav_header(self.rate)


class _AVStream:
    def __init__(self, response_format: str, rate: int):
        import av

        container, codec = CONTAINERS[response_format]
        self._sink = _Sink()
        self._out = av.open(self._sink, mode="w", format=container)
        stream: Any = self._out.add_stream(codec, rate=_rate_for(codec, rate))
        stream.layout = "mono"
        self._stream = stream
        ctx: Any = stream.codec_context
        self._resampler = av.AudioResampler(
            format=ctx.codec.audio_formats[0].name,
            layout="mono",
            rate=ctx.sample_rate,
            frame_size=ctx.frame_size or None,
        )
        self._rate = rate
        self._pts = 0

    def feed(self, samples: np.ndarray) -> bytes:
        import av

        frame = av.AudioFrame.from_ndarray(
            np.asarray(samples, dtype=np.float32).reshape(1, -1), format="flt", layout="mono"
        )
        frame.sample_rate = self._rate
        self._encode(self._resampler.resample(frame))
        return self._sink.take()

    def close(self) -> bytes:
        self._encode(self._resampler.resample(None))
        self._out.mux(self._stream.encode(None))
        self._out.close()
        return self._sink.take()

    def _encode(self, frames: list[Any]) -> None:
        for frame in frames:
            frame.pts = self._pts
            self._pts += frame.samples
            self._out.mux(self._stream.encode(frame))


def _rate_for(codec: str, rate: int) -> int:
    """`rate` where the codec takes it, else the nearest higher rate it takes (Opus: 48 kHz
    for 44.1 kHz speech)."""
    import av

    rates = av.codec.Codec(codec, "w").audio_rates
    if not rates or rate in rates:
        return rate
    higher = [r for r in rates if r >= rate]
    return min(higher) if higher else max(rates)
