"""The MLX imager: an image generation model in a process of its own (omni.runtime.images.worker).
The server never imports MLX or mflux for it: what comes back over the pipe is each picture,
encoded, and the partial ones on the way, read by a thread and handed to the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from omni.errors import OmniError
from omni.ports.images import Drawn, ImageCapabilities, ImageOrder, PartialPicture, Picture
from omni.runtime.images import wire, worker
from omni.runtime.model_process import ModelProcess


class Cancelled(OmniError):
    """The model stopped the request: its client went away."""


class MLXImager(ModelProcess):
    """Implements omni.ports.images.Imager: start() loads the model, draw() yields what one request
    makes as its process sends it (one request is drawn at a time; others wait)."""

    def __init__(self, path: str, model_id: str):
        super().__init__(path, "image model", "omni-imager", wire.Close())
        self.model_id = model_id
        self._caps = ImageCapabilities(4)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        message = self.launch(worker.main, (self.path,), wire.Loaded)
        self._caps = ImageCapabilities(message.default_steps)

    @property
    def capabilities(self) -> ImageCapabilities:
        return self._caps

    async def draw(self, order: ImageOrder) -> AsyncIterator[PartialPicture | Picture | Drawn]:
        """Each image's partial pictures then the picture, then one Drawn; a failure of the
        model raises OmniError. Left before its end, the job is cancelled in the model."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        job_id = self.expect(queue)
        ended = False
        try:
            self._send(wire.Generate(**dataclasses.asdict(order), id=job_id))
            while True:
                match await queue.get():
                    case wire.Partial(_, image, index, data):
                        yield PartialPicture(image, index, data)
                    case wire.Picture(_, image, seed, data, input_tokens, output_tokens):
                        yield Picture(image, seed, data, input_tokens, output_tokens)
                    case wire.Done(_, input_tokens, output_tokens):
                        ended = True
                        yield Drawn(input_tokens, output_tokens)
                        return
                    case wire.Failed(_, message, cancelled):
                        ended = True
                        if cancelled:
                            raise Cancelled("the image generation was cancelled")
                        raise self.failed(message)
                    case OmniError() as gone:
                        ended = True
                        raise gone
        finally:
            self._pending.pop(job_id, None)
            if not ended:  # its reader went away: the model stops at its next step
                try:
                    self._send(wire.Cancel(job_id))
                except OmniError:
                    pass
