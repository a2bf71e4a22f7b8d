"""The MLX transcriber: a Whisper model in a process of its own (omni.runtime.
transcribe_worker), answered by a reader thread so that the event loop never waits on the
pipe. The process preloads the engine's BLAS (omni.runtime.blas): Whisper runs in float32 on
MLX's CPU, where the BLAS does its matrix products."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError, OmniError
from omni.jobs import Audio, TranscribeOptions
from omni.runtime import audio, transcribe_wire, transcribe_worker
from omni.runtime.model_process import ModelProcess


class MLXTranscriber(ModelProcess):
    """Implements omni.jobs.Transcriber."""

    def __init__(self, path: str, model_id: str):
        super().__init__(path, "transcription model", "omni-transcriber", transcribe_wire.Close())
        self.model_id = model_id
        self.multilingual = False

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        if not (Path(self.path) / "config.json").is_file():
            raise ModelLoadError(f"cannot load transcription model {self.path}: no config.json")
        loaded = self.launch(transcribe_worker.main, (self.path,), transcribe_wire.Loaded)
        self.multilingual = loaded.multilingual

    def decode(self, data: bytes, filename: str) -> Audio:
        return audio.decode(data, filename)

    async def transcribe(self, heard: Audio, options: TranscribeOptions) -> dict[str, Any]:
        # Megabytes of audio: ask() sends them off the loop.
        result: dict[str, Any] = await self.ask(
            lambda i: transcribe_wire.Transcribe(i, heard.samples, options)
        )
        return result

    def answer(self, reply: Any) -> Any:
        match reply:
            case transcribe_wire.Transcript(_, result):
                return result
            case transcribe_wire.Failed(_, message):
                return OmniError(f"the transcription model failed: {message}")
