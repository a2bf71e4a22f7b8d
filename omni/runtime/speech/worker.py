"""A speech model's process: loads a text-to-speech model with mlx-audio, then speaks what the
server sends, one request at a time, until it closes. Each segment the model yields (Kokoro:
a sentence or a line) is encoded and sent at once; a cancel is read between segments. Only
mlx-audio's model code is imported, never its command-line generator, whose audio player
needs PortAudio."""

from __future__ import annotations

import inspect
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.runtime.chat.inbox import Inbox
from omni.runtime.model_worker import serve_in_turn, serve_model
from omni.runtime.speech.encoder import Encoder
from omni.runtime.speech.wire import Audio, Close, Done, Failed, Loaded, Speak

# Kokoro's voices are named for their language: 'af_heart' speaks American English ('a'),
# 'ef_dora' Spanish ('e'); its pipeline needs that letter.
KOKORO_LANGUAGES = "abefhijpz"


class Speaker:
    def __init__(self, path: str):
        from mlx_audio.tts.utils import load_model

        folder = Path(path)
        self.model = load_model(folder if folder.exists() else path)
        self.rate = int(self.model.sample_rate)
        self.kokoro = type(self.model).__module__.startswith("mlx_audio.tts.models.kokoro")
        self.voices = _voices(self.model, folder)
        params = inspect.signature(self.model.generate).parameters
        self.takes_instructions = "instruct" in params

    def loaded(self) -> Loaded:
        """What the server is told of the model once it is loaded."""
        default = self.voices[0] if self.voices else None
        if self.kokoro and "af_heart" in self.voices:  # Kokoro's own default
            default = "af_heart"
        return Loaded(self.rate, self.voices, default, self.takes_instructions)

    def speak(self, conn: Connection, inbox: Inbox, job: Speak) -> None:
        """Each segment's audio, encoded, as the model yields it; a cancel stops the model
        before its next segment (the file is left unfinished: nobody is left to read it)."""
        import numpy as np

        encoder = Encoder(job.response_format, self.rate)
        samples = tokens = segments = 0
        if inbox.cancelled():
            conn.send(Done(job.id, 0, 0, 0, True))
            return
        options: dict[str, Any] = {"voice": job.voice, "speed": job.speed}
        if self.kokoro and job.voice and job.voice[0] in KOKORO_LANGUAGES:
            options["lang_code"] = job.voice[0]
        if job.instructions is not None:
            options["instruct"] = job.instructions
        spoken = self.model.generate(job.text, **options)
        try:
            for segment in spoken:
                audio = np.asarray(segment.audio, dtype=np.float32).reshape(-1)
                samples += audio.shape[0]
                tokens += int(segment.token_count or 0)
                segments += 1
                if data := encoder.feed(audio):
                    conn.send(Audio(job.id, data))
                if inbox.cancelled():
                    conn.send(Done(job.id, samples, tokens, segments, True))
                    return
        finally:
            if inspect.isgenerator(spoken):  # its pipeline let go at once, not when collected
                spoken.close()
        if data := encoder.close():
            conn.send(Audio(job.id, data))
        conn.send(Done(job.id, samples, tokens, segments))


def _voices(model: Any, folder: Path) -> tuple[str, ...]:
    """The voice packs beside the weights (Kokoro's voices/*.safetensors); none: not known."""
    root = Path(getattr(getattr(model, "config", None), "model_path", None) or folder)
    return tuple(sorted(p.stem for p in (root / "voices").glob("*.safetensors")))


def main(conn: Connection, path: str) -> None:
    def load() -> tuple[Speaker, Loaded]:
        speaker = Speaker(path)
        return speaker, speaker.loaded()

    serve_model(conn, "speech", load, lambda speaker: serve(conn, speaker))


def serve(conn: Connection, speaker: Speaker) -> None:
    serve_in_turn(conn, Close, lambda inbox, job: speaker.speak(conn, inbox, job), Failed)
