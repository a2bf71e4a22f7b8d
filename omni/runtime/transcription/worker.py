"""A transcription model's process: loads mlx-audio's Whisper from a converted folder, then
transcribes what the server sends, one recording at a time, each window sent as it is heard
(omni.runtime.transcription.windows), until it closes. Only Whisper's
own modules are imported: mlx-audio's playback (sounddevice, PortAudio) never is."""

from __future__ import annotations

import json
import math
from collections.abc import Generator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.ports.transcription import TranscribeOptions
from omni.runtime.chat.inbox import Inbox
from omni.runtime.model_worker import serve_in_turn, serve_model
from omni.runtime.transcription.wire import Close, Failed, Loaded, Transcribe, Transcript, Window

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


def hear(model: Any, samples: bytes, options: TranscribeOptions) -> Generator[Any, None, None]:
    """The recording's windows as they are heard (omni.runtime.transcription.windows.Window)."""
    import mlx.core as mx
    import numpy as np

    from omni.runtime.transcription.windows import Hearing, windows

    temperature = options.temperature or 0.0
    hearing = Hearing(
        language=options.language if model.is_multilingual else "en",
        task="translate" if options.translate and model.is_multilingual else "transcribe",
        temperatures=FALLBACK if temperature == 0.0 else (temperature,),
        prompt=options.prompt,
        words=options.words,
        fp16=model.dtype == mx.float16,
    )
    return windows(model, mx.array(np.frombuffer(samples, dtype="<f4")), hearing)


def segments(window: Any) -> list[dict[str, Any]]:
    """A window's segments with text, as JSON holds them."""
    return [_plain(s) for s in window.segments if s.get("text")]


def transcript(language: str, heard: list[dict[str, Any]]) -> dict[str, Any]:
    return {"text": "".join(s["text"] for s in heard).strip(), "language": language,
            "segments": heard}  # fmt: skip


def transcribe(model: Any, samples: bytes, options: TranscribeOptions) -> dict[str, Any]:
    """The whole recording at once."""
    heard, language = [], "en"
    for window in hear(model, samples, options):
        heard += segments(window)
        language = window.language
    return transcript(language, heard)


def run(conn: Connection, inbox: Inbox, model: Any, job: Transcribe) -> None:
    """Send each window as it is heard, then the transcript; a cancel stops it between
    windows (the transcript so far says so)."""
    heard: list[dict[str, Any]] = []
    language, count = "en", 0
    windows = hear(model, job.samples, job.options)
    stop = inbox.cancelled()  # before it began: nothing is heard
    try:
        for window in () if stop else windows:
            language = window.language
            these = segments(window)
            heard += these
            conn.send(Window(job.id, count, these, window.seconds))
            count += 1
            if window.last:  # heard whole: a cancel that came meanwhile has nothing to stop
                break
            if stop := inbox.cancelled():
                break
    finally:
        windows.close()
    conn.send(Transcript(job.id, transcript(language, heard), count, stop))


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
    def loaded() -> tuple[Any, Loaded]:
        model = load(path)
        return model, Loaded(bool(model.is_multilingual))

    def serve(model: Any) -> None:
        serve_in_turn(conn, Close, lambda inbox, job: run(conn, inbox, model, job), Failed)

    serve_model(conn, "transcription", loaded, serve)
