"""Image generation over the event log. Each request is a stream `img-X`: `images.in_progress`
when accepted (its request on `img-X/request`: model, size, quality, steps, the seed it draws
with, the prompt as a response records its input, owner), one `images.image` as each image
is drawn (its seed and bytes), then `images.completed` (usage, timings) or `images.failed`.
The pictures are the answer, not the record: never written; the seed draws them again."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from omni.errors import internal
from omni.events import Append, NewEvent
from omni.ids import new_id
from omni.ports.images import Drawn, ImageOrder, Imager, PartialPicture, Picture
from omni.schemas.images import ImageGenerate
from omni.service.modality import LeftOpen, ModelRequests, error_body, now_ms, submit_end
from omni.service.models import LOAD_MS
from omni.service.streams import dumps, request_stream
from omni.vocabulary import (
    ACCEPTED,
    ID_PREFIXES,
    IMAGE,
    IMAGES_COMPLETED,
    IMAGES_ENDS,
    IMAGES_FAILED,
    IMAGES_IMAGE,
    IMAGES_IN_PROGRESS,
)

RESTARTED = "The server restarted before these images were drawn."
GONE = "The client went away before its images were drawn."
CANCELLED = error_body(GONE, "cancelled")  # an ending's error: the client went away
log = logging.getLogger(__name__)
Piece = PartialPicture | Picture | Drawn


class ImagerSource(Protocol):
    """What the service asks of the model pool (omni.service.models.Models)."""

    def use_imager(self, name: str | None) -> AbstractAsyncContextManager[Imager]:
        """The image model `name` names (None: the default one), loaded and kept loaded while
        the request is taken in; a ModelNotFound, or an InvalidRequest for another kind."""
        ...


@dataclass(frozen=True)
class Generation:
    """An accepted image generation: its id, what it draws, and what the model makes (each
    image's partial pictures, then the picture), then one Drawn."""

    id: str
    model: str
    size: str  # WIDTHxHEIGHT
    quality: str
    output_format: str
    created: int
    pieces: AsyncIterator[Piece]


def order_for(body: ImageGenerate, imager: Imager, seed: int) -> ImageOrder:
    width, height = body.dimensions
    return ImageOrder(
        prompt=body.prompt,
        n=body.n,
        width=width,
        height=height,
        steps=body.steps(imager.capabilities.default_steps),
        seed=seed,
        output_format=body.output_format or "png",
        compression=100 if body.output_compression is None else body.output_compression,
        partial_images=(body.partial_images or 0) if body.stream else 0,
    )


class ImagesService(ModelRequests[ImagerSource]):
    kinds = (IMAGE,)
    left_open = LeftOpen.failing(
        IMAGES_IN_PROGRESS, IMAGES_ENDS, IMAGES_FAILED, RESTARTED, "image generations"
    )

    async def create(self, body: ImageGenerate, owner: str | None = None) -> Generation:
        """`owner`'s images, accepted and the model's first piece made (so that a model's
        failure is still an error the client reads)."""
        queued_at = now_ms()
        async with self.models.use_imager(body.model) as imager:
            seed = secrets.randbelow(2**31) if body.seed is None else body.seed
            order = order_for(body, imager, seed)
            gid = new_id("img").replace("img_", ID_PREFIXES[IMAGE])
            await self.leasing.claim(gid)
            try:
                await self._accept(gid, body, order, imager.model_id, owner, queued_at)
                timings = {"queued_at": queued_at, "started_at": now_ms()}
                pieces = imager.draw(order)
                first = await self._first(gid, imager.model_id, pieces, timings)
            except BaseException:
                await self.leasing.release([gid])
                raise
        rest = self._rest(gid, imager.model_id, first, pieces, timings)
        size = f"{order.width}x{order.height}"
        return Generation(gid, imager.model_id, size, body.quality_name, order.output_format,
                          queued_at // 1000, rest)  # fmt: skip

    async def _first(
        self, gid: str, model_id: str, pieces: AsyncIterator[Piece], timings: dict[str, int]
    ) -> Piece:
        try:
            return await anext(pieces)
        except asyncio.CancelledError:
            submit_end(self.appender, gid, 1, IMAGES_FAILED, model_id, timings, CANCELLED)
            raise
        except Exception as exc:
            failure = internal(exc, f"image generation {gid}")
            await submit_end(
                self.appender, gid, 1, IMAGES_FAILED, model_id, timings, failure.body()
            )
            raise failure from None

    async def _rest(
        self,
        gid: str,
        model_id: str,
        first: Piece,
        pieces: AsyncIterator[Piece],
        timings: dict[str, int],
    ) -> AsyncIterator[Piece]:
        """The pieces from the first on, each image recorded as it is drawn; the log's ending
        once the last is, or once the model fails or the client goes."""
        seq, piece, sent = 1, first, 0
        try:
            while not isinstance(piece, Drawn):
                if isinstance(piece, Picture):
                    made = {"id": gid, "index": piece.image, "seed": piece.seed,
                            "bytes": len(piece.data)}  # fmt: skip
                    await self.appender.append(
                        Append(gid, seq, [NewEvent(IMAGES_IMAGE, dumps(made))])
                    )
                    seq, sent = seq + 1, sent + len(piece.data)
                yield piece
                piece = await anext(pieces)
            spent = usage(piece.input_tokens, piece.output_tokens)
            done = {"images": seq - 1, "bytes": sent, "usage": spent}
            await submit_end(self.appender, gid, seq, IMAGES_COMPLETED, model_id, timings, done)
            yield piece
        except (asyncio.CancelledError, GeneratorExit):
            submit_end(self.appender, gid, seq, IMAGES_FAILED, model_id, timings, CANCELLED)
            raise
        except Exception as exc:
            log.warning("image generation %s failed after its first piece: %s", gid, exc)
            failure = internal(exc, f"image generation {gid}")
            await submit_end(
                self.appender, gid, seq, IMAGES_FAILED, model_id, timings, failure.body()
            )
            raise failure from None
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
            await self.leasing.release([gid])

    async def _accept(
        self,
        gid: str,
        body: ImageGenerate,
        order: ImageOrder,
        model_id: str,
        owner: str | None,
        queued_at: int,
    ) -> None:
        size = f"{order.width}x{order.height}"
        request = {
            "kind": IMAGE,
            "model": model_id,
            "body": body.model_dump(mode="json", exclude_none=True),
            "size": size,
            "quality": body.quality_name,
            "steps": order.steps,
            "seed": order.seed,
            "prompt_chars": len(body.prompt),
            "owner": owner,
            "load_ms": LOAD_MS.get(),  # its model's load, if it waited for one
            "created": queued_at // 1000,
        }
        opening = {"id": gid, "model": model_id, "n": order.n, "size": size,
                   "quality": body.quality_name, "steps": order.steps, "seed": order.seed,
                   "output_format": order.output_format}  # fmt: skip
        await self.appender.append(
            Append(request_stream(gid), 0, [NewEvent(ACCEPTED, dumps(request))]),
            Append(gid, 0, [NewEvent(IMAGES_IN_PROGRESS, dumps(opening))]),
        )


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """OpenAI's usage of an image generation: the prompt's tokens, and the image's (here the
    latent patches drawn)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": input_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"image_tokens": output_tokens, "text_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
