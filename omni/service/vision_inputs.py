"""The images of a request (Responses' input_image parts, chat's image_url parts): where each
sits, for errors that name it, and its bytes, decoded from a data: URL or fetched from an
http(s) URL. The log keeps every image as the client sent it (input_items returns it so); the
bytes go with the prompt to a vision model's engine, and are never stored apart. An http(s)
URL that gives no image is one and the same 400, whatever the reason (image_urls.py)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from omni.errors import InvalidRequest
from omni.ports.chat import Engine
from omni.service.image_urls import FETCH_THREADS, MAX_IMAGE_BYTES, Fetcher, Unfetchable

log = logging.getLogger(__name__)
_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*),(?P<data>.*)", re.DOTALL)
# Fetches wait on other hosts, up to their deadline: on threads of their own, never the
# default executor's, which models load on (a flood of slow URLs would starve it).
_FETCHING = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="omni-image-fetch")


@dataclass(frozen=True, slots=True)
class ImageRef:
    url: str  # a data: URL or an http(s) URL, as the client sent it
    param: str  # where the request holds it ("input[0].content[1]")


def item_images(items: Sequence[dict[str, Any]], param: str = "input") -> list[ImageRef]:
    """The input_image parts of stored input items, in order; `param`: what the items are
    (the request's `input`, or the `previous_response_id` whose chain holds them)."""
    refs = []
    for i, item in enumerate(items):
        if item.get("type") != "message" or not isinstance(item.get("content"), list):
            continue
        for j, part in enumerate(item["content"]):
            if part.get("type") == "input_image":
                where = f"{param}[{i}].content[{j}]" if param == "input" else param
                refs.append(ImageRef(part["image_url"], where))
    return refs


def message_images(contents: Sequence[Any]) -> list[ImageRef]:
    """The image_url parts of chat messages (their contents, in order)."""
    refs = []
    for i, content in enumerate(contents):
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") == "image_url":
                ref = part["image_url"]
                url = ref if isinstance(ref, str) else ref["url"]
                refs.append(ImageRef(url, f"messages[{i}].content[{j}]"))
    return refs


def refuse_images(engine: Engine, refs: Sequence[ImageRef]) -> None:
    """A 400 naming the first image, for a model that takes text only."""
    if refs and not engine.capabilities.vision:
        raise InvalidRequest(
            f"The model '{engine.model_id}' does not accept images: it takes text only "
            "(serve a vision-language model to send images).",
            param=refs[0].param,
            code="invalid_image",
        )


async def load_images(refs: Iterable[ImageRef], fetcher: Fetcher | None) -> dict[str, bytes]:
    """Each distinct image's bytes by its URL, checked to be an image (400s name the part);
    read in a worker thread: decoding and checking megabytes is no work for the event loop.
    `fetcher` None: an http(s) URL is a 400 (`--no-image-urls`: a server that clients must
    not make reach other hosts at all)."""
    loop = asyncio.get_running_loop()
    loaded: dict[str, bytes] = {}
    for ref in refs:
        if ref.url not in loaded:
            threads = _FETCHING if _fetched(ref.url) else None  # None: the default executor
            loaded[ref.url] = await loop.run_in_executor(threads, _read, ref, fetcher)
    return loaded


def pictures(refs: Iterable[ImageRef], loaded: Mapping[str, bytes]) -> tuple[bytes, ...]:
    """The bytes of `refs`, in order: the images a job's prompt holds."""
    return tuple(loaded[ref.url] for ref in refs)


def _fetched(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _read(ref: ImageRef, fetcher: Fetcher | None) -> bytes:
    if not _fetched(ref.url):
        return _checked(_decode(ref), ref)
    if fetcher is None:
        raise InvalidRequest(
            "This server does not fetch images from URLs (it runs with --no-image-urls): "
            "send the image as a data: URL (data:image/png;base64,...).",
            param=ref.param,
            code="invalid_image_url",
        )
    try:
        return _checked(fetcher.fetch(ref.url), ref)
    except (Unfetchable, InvalidRequest) as exc:  # what answered, if anything, is for the log
        log.info("image %s (%s) not fetched: %s", _where(ref.url), ref.param, exc)
        raise InvalidRequest(
            "The image could not be fetched from its URL: an image URL must name a public "
            "http(s) server that answers with a PNG, JPEG, GIF or WebP image of at most "
            f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB.",
            param=ref.param,
            code="failed_to_download_image",
        ) from None


def _where(url: str) -> str:
    """`url`'s scheme, host (and port) and path: for the log, which keeps no signed URL's
    token (its query), nor a user or password."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _decode(ref: ImageRef) -> bytes:
    match = _DATA_URL.fullmatch(ref.url)
    if match is None:
        raise InvalidRequest(
            "An image URL must be an http(s) URL or a data: URL (data:image/png;base64,...).",
            param=ref.param,
            code="invalid_image_url",
        )
    if not match["type"].startswith("image/"):
        raise InvalidRequest(
            f"The data URL's media type {match['type'] or '(none)'!r} is not an image type.",
            param=ref.param,
            code="unsupported_image_media_type",
        )
    if ";base64" not in match["params"]:
        raise InvalidRequest(
            "An image data URL must be base64-encoded (data:image/png;base64,...).",
            param=ref.param,
            code="invalid_base64_image",
        )
    if len(match["data"]) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise _too_large(ref)
    try:
        return base64.b64decode(match["data"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(
            "The image data URL is not valid base64.", param=ref.param, code="invalid_base64_image"
        ) from None


def _checked(data: bytes, ref: ImageRef) -> bytes:
    """`data` if an image library can read it as an image, else a 400."""
    if not data:
        raise InvalidRequest("The image is empty.", param=ref.param, code="empty_image_file")
    if len(data) > MAX_IMAGE_BYTES:
        raise _too_large(ref)
    from PIL import Image, UnidentifiedImageError
    from PIL.Image import DecompressionBombError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except (UnidentifiedImageError, DecompressionBombError, OSError, ValueError, SyntaxError):
        raise InvalidRequest(
            "The image could not be read: it is not a PNG, JPEG, GIF or WebP image "
            "(or it is damaged).",
            param=ref.param,
            code="invalid_image_format",
        ) from None
    return data


def _too_large(ref: ImageRef) -> InvalidRequest:
    return InvalidRequest(
        f"The image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB.",
        param=ref.param,
        code="image_too_large",
    )
