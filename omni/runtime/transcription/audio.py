"""Uploaded audio decoded to what Whisper hears: 16 kHz mono float32, through PyAV (FFmpeg's
decoders, bundled in its wheels): wav, mp3, m4a, webm, ogg, flac and the rest FFmpeg reads. A
file FFmpeg finds no audio in is an InvalidRequest naming the `file` parameter."""

from __future__ import annotations

import io
from typing import Any

from omni.errors import InvalidRequest
from omni.ports.transcription import Audio

SAMPLE_RATE = 16000


def decode(data: bytes, filename: str = "audio") -> Audio:
    import av
    import numpy as np

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise InvalidRequest(f"'{filename}' holds no audio.", param="file")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            chunks: list[Any] = []
            for frame in container.decode(audio=0):
                chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
            name = container.format.name
    except av.error.FFmpegError as exc:
        raise InvalidRequest(
            f"'{filename}' is not an audio file FFmpeg can decode ({exc.strerror or exc}); "
            "send wav, mp3, m4a, webm, ogg or flac.",
            param="file",
        ) from None
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if samples.size == 0:
        raise InvalidRequest(f"'{filename}' holds no audio samples.", param="file")
    return Audio(samples.astype("<f4").tobytes(), name, samples.size / SAMPLE_RATE)
