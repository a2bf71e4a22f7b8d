"""An image model's process: loads a FLUX.2 [klein] folder with mflux, then draws what the
server asks, one request at a time, until it closes. mflux's step callback decodes the
latents on the way for partial images, and looks at the pipe for a cancel between steps.

The folder is a Hugging Face snapshot or what `mflux-save` writes: its model_index.json
says whether the model is step-distilled, and the transformer's and the text encoder's
config.json their widths, which mflux builds them with (the 4B and the 9B alike)."""

from __future__ import annotations

import copy
import inspect
import io
import json
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.ports.images import ImageOrder
from omni.runtime.images.wire import Cancel, Close, Done, Failed, Generate, Loaded, Partial, Picture
from omni.runtime.model_worker import serve_model, why

PATCH = 16  # pixels a latent patch covers (the VAE's 8, patchified by 2)
# Distilled checkpoints take 4 steps without guidance; the base ones 50 with it.
DISTILLED = {"steps": 4, "guidance": 1.0}
BASE = {"steps": 50, "guidance": 4.0}


class Stopped(Exception):
    """The job's client went away (or the server closes): stop at this step."""


class Imager:
    def __init__(self, path: str, conn: Connection):
        from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein

        folder = Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"{path} is not a folder (a FLUX.2 [klein] snapshot)")
        index = _json(folder / "model_index.json")
        self.defaults = DISTILLED if index.get("is_distilled", True) else BASE
        self.model = Flux2Klein(model_path=str(folder), model_config=model_config(folder, index))
        self.model.callbacks.register(self)
        self.conn = conn
        self.waiting: deque[Any] = deque()  # what came down the pipe during a job
        self.job: Generate | None = None
        self.image = 0
        self.partial_at: list[int] = []

    def generate(self, job: Generate) -> None:
        self.job, self.partial_at = job, partial_steps(job.steps, job.partial_images)
        tokens = self.model.tokenizers["qwen3"].tokenize(job.prompt)
        input_tokens = int(tokens.attention_mask.sum().item())
        patches = (job.width // PATCH) * (job.height // PATCH)
        try:
            for i in range(job.n):
                self.image = i
                seed = job.seed + i
                made = self.model.generate_image(
                    seed=seed,
                    prompt=job.prompt,
                    num_inference_steps=job.steps,
                    height=job.height,
                    width=job.width,
                    guidance=self.defaults["guidance"],
                )
                data = encode(made.image, job)
                self.conn.send(Picture(job.id, i, seed, data, input_tokens, patches))
        finally:
            self.job = None
        self.conn.send(Done(job.id, input_tokens, patches * job.n))

    # mflux's in-loop callback: after each denoising step.
    def call_in_loop(
        self, t: int, seed: int, prompt: str, latents: Any, config: Any, time_steps: Any
    ) -> None:
        job = self.job
        if job is None:
            return
        self._look(job)
        step = t + 1
        if step in self.partial_at:
            from mflux.models.flux2.latent_creator.flux2_latent_creator import (
                Flux2LatentCreator,
            )
            from mflux.utils.image_util import ImageUtil

            packed = Flux2LatentCreator.unpack_latents(latents, config.height, config.width)
            picture = ImageUtil.to_pil(self.model.vae.decode_packed_latents(packed))
            index = self.partial_at.index(step)
            self.conn.send(Partial(job.id, self.image, index, encode(picture, job)))

    def _look(self, job: Generate) -> None:
        """Read what the server sent meanwhile: a cancel of this job (or the end) stops it;
        anything else waits for the job to end."""
        while self.conn.poll():
            message = self.conn.recv()
            if isinstance(message, Cancel) and message.id == job.id:
                raise Stopped
            self.waiting.append(message)
            if isinstance(message, Close):
                raise Stopped


def model_config(folder: Path, index: dict[str, Any]) -> Any:
    """mflux's model config for the folder: FLUX.2 [klein]'s, with its parts' widths."""
    from mflux.models.common.config.model_config import ModelConfig
    from mflux.models.flux2.model.flux2_text_encoder.qwen3_text_encoder import Qwen3TextEncoder
    from mflux.models.flux2.model.flux2_transformer.transformer import Flux2Transformer

    distilled = index.get("is_distilled", True)
    base = ModelConfig.flux2_klein_4b() if distilled else ModelConfig.flux2_klein_base_4b()
    config = copy.copy(base)
    config.model_name = str(folder)
    config.transformer_overrides = _arguments(
        Flux2Transformer, _json(folder / "transformer" / "config.json")
    )
    config.text_encoder_overrides = _arguments(
        Qwen3TextEncoder, _json(folder / "text_encoder" / "config.json")
    )
    return config


def partial_steps(steps: int, partials: int) -> list[int]:
    """The steps after which a partial image is decoded: `partials` spread evenly, never the
    last (that one is the image); fewer where the steps are too few."""
    at = {round(steps * (i + 1) / (partials + 1)) for i in range(partials)}
    return sorted(s for s in at if 0 < s < steps)


def encode(picture: Any, order: ImageOrder) -> bytes:
    out = io.BytesIO()
    if order.output_format == "png":
        picture.save(out, format="PNG")
    else:
        fmt = "JPEG" if order.output_format == "jpeg" else "WEBP"
        picture.convert("RGB").save(out, format=fmt, quality=order.compression)
    return out.getvalue()


def _arguments(cls: type, config: dict[str, Any]) -> dict[str, Any]:
    """The config's values that `cls` takes (a Hugging Face config holds more)."""
    names = set(inspect.signature(cls).parameters) - {"self"}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in names}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def main(conn: Connection, path: str) -> None:
    def load() -> tuple[Imager, Loaded]:
        imager = Imager(path, conn)
        return imager, Loaded(int(imager.defaults["steps"]))

    # TQDM_DISABLE: mflux's progress bars, which nobody reads.
    serve_model(conn, "images", load, lambda imager: serve(conn, imager), TQDM_DISABLE="1")


def serve(conn: Connection, imager: Imager) -> None:
    while True:
        message = imager.waiting.popleft() if imager.waiting else conn.recv()
        match message:
            case Close():
                return
            case Generate() as job:
                try:
                    imager.generate(job)
                except Stopped:
                    conn.send(Failed(job.id, "cancelled", cancelled=True))
                except Exception as exc:  # noqa: BLE001 - reported to the server as a value
                    conn.send(Failed(job.id, why(exc)))
            case Cancel():  # of a job already done
                pass
