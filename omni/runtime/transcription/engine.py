"""The MLX transcriber: a Whisper model in a process of its own
(omni.runtime.transcription.worker), answered by a reader thread so that the event loop never
waits on the pipe. The process preloads the engine's BLAS (omni.runtime.platform.blas): Whisper
runs in float32 on MLX's CPU, where the BLAS does its matrix products."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError, OmniError
from omni.ports.transcription import Audio, Heard, TranscribeOptions, Transcript
from omni.runtime.model_process import ModelProcess, Replies
from omni.runtime.transcription import audio, wire, worker


class MLXTranscriber(ModelProcess):
    """Implements omni.ports.transcription.Transcriber."""

    def __init__(self, path: str, model_id: str):
        super().__init__(path, "transcription model", "omni-transcriber", wire.Close())
        self.model_id = model_id
        self.multilingual = False

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        if not (Path(self.path) / "config.json").is_file():
            raise ModelLoadError(f"cannot load transcription model {self.path}: no config.json")
        loaded = self.launch(worker.main, (self.path,), wire.Loaded)
        self.multilingual = loaded.multilingual

    def decode(self, data: bytes, filename: str) -> Audio:
        return audio.decode(data, filename)

    async def transcribe(
        self, heard: Audio, options: TranscribeOptions
    ) -> Replies[Heard | Transcript]:
        """Each window as the model's process hears it, then the transcript."""
        return await self.stream(lambda i: wire.Transcribe(i, heard.samples, options), self._piece)

    def _piece(self, reply: Any) -> tuple[Heard | Transcript, bool]:
        match reply:
            case wire.Window(_, window, segments, seconds):
                return Heard(window, segments, seconds), False
            case wire.Transcript(_, result, windows, cancelled):
                return Transcript(result, windows, cancelled), True
            case wire.Failed(_, message):
                raise self.failed(message)
        raise OmniError(f"the transcription model sent {type(reply).__name__}")
