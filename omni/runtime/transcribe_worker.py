"""A transcription model's process: loads mlx-audio's Whisper from a converted folder, then
transcribes what the server sends, one recording at a time, until it closes. Only Whisper's
own modules are imported: mlx-audio's playback (sounddevice, PortAudio) never is."""

from __future__ import annotations

import json
import math
import os
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.jobs import TranscribeOptions
from omni.runtime import worker
from omni.runtime.quiet import no_torch_advice
from omni.runtime.transcribe_wire import (
    Close,
    Failed,
    Loaded,
    LoadFailed,
    Transcribe,
    Transcript,
)

FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # Whisper's temperatures, tried in turn


def load(path: str) -> Any:
    """The model, in float32 on MLX's CPU (whose float32 products are the BLAS's, its
    half-precision ones its own slow loops: tiny.en encodes 30 s ~8x faster), else as stored."""
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    dtype = mx.float32 if mx.default_device() == mx.cpu else mx.float16
    model = Model(ModelDimensions.from_dict(config), dtype)
    weights = mx.load(str(folder / "model.safetensors"))
    assert isinstance(weights, dict)
    model.load_weights([(k, v.astype(dtype)) for k, v in weights.items()])
    mx.eval(model.parameters())
    return Model.post_load_hook(model, folder)


def transcribe(model: Any, samples: bytes, options: TranscribeOptions) -> dict[str, Any]:
    import mlx.core as mx
    import numpy as np

    audio = mx.array(np.frombuffer(samples, dtype="<f4"))
    temperature = options.temperature or 0.0
    out = model.generate(
        audio,
        language=options.language if model.is_multilingual else "en",
        task="translate" if options.translate and model.is_multilingual else "transcribe",
        temperature=FALLBACK if temperature == 0.0 else temperature,
        initial_prompt=options.prompt,
        word_timestamps=options.words,
        fp16=model.dtype == mx.float16,
    )
    segments = [_plain(s) for s in out.segments or [] if s.get("text")]
    return {"text": out.text.strip(), "language": out.language, "segments": segments}


def _plain(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment as JSON can hold it (NaN as 0; numpy and MLX numbers as Python's)."""

    def number(value: Any) -> float:
        value = float(value)
        return 0.0 if math.isnan(value) or math.isinf(value) else value

    out: dict[str, Any] = {
        "id": int(segment["id"]),
        "seek": int(segment.get("seek", 0)),
        "start": number(segment["start"]),
        "end": number(segment["end"]),
        "text": str(segment["text"]),
        "tokens": [int(t) for t in segment.get("tokens", [])],
        "temperature": number(segment.get("temperature", 0.0)),
        "avg_logprob": number(segment.get("avg_logprob", 0.0)),
        "compression_ratio": number(segment.get("compression_ratio", 0.0)),
        "no_speech_prob": number(segment.get("no_speech_prob", 0.0)),
    }
    if "words" in segment:
        out["words"] = [
            {"word": str(w["word"]), "start": number(w["start"]), "end": number(w["end"])}
            for w in segment["words"]
        ]
    return out


def main(conn: Connection, path: str) -> None:
    worker._die_with_parent()
    os.environ.pop("LD_PRELOAD", None)  # the BLAS is in this process; not in what it starts
    no_torch_advice()
    try:
        model = load(path)
    except BaseException as exc:  # noqa: BLE001 - reported to the server as a value
        conn.send(LoadFailed(f"{type(exc).__name__}: {exc}"))
        return
    conn.send(Loaded(bool(model.is_multilingual)))
    try:
        while True:
            message = conn.recv()
            if isinstance(message, Close):
                return
            assert isinstance(message, Transcribe)
            try:
                result = transcribe(model, message.samples, message.options)
            except Exception as exc:  # noqa: BLE001 - reported to the server as a value
                conn.send(Failed(message.id, f"{type(exc).__name__}: {exc}"))
                continue
            conn.send(Transcript(message.id, result))
    except (EOFError, OSError):  # the server is gone: nobody is left to transcribe for
        pass
