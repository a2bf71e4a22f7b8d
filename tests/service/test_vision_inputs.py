"""What vision_inputs.py makes of an image: every picture that cannot be taken is a 400 in
OpenAI's shape, and the log says what went wrong without the secrets a URL may carry."""

from __future__ import annotations

import base64
import logging
import struct
import zlib

import pytest

from omni.errors import InvalidRequest
from omni.image_hosts import ImageHosts
from omni.service.image_urls import Fetcher
from omni.service.vision_inputs import ImageRef, load_images

PART = "input[0].content[1]"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb() -> bytes:
    """A PNG of a few bytes whose header says 30000 x 30000 pixels: a decompression bomb."""
    header = struct.pack(">IIBBBBB", 30000, 30000, 1, 0, 0, 0, 0)
    return b"".join([
        b"\x89PNG\r\n\x1a\n",
        _chunk(b"IHDR", header),
        _chunk(b"IDAT", zlib.compress(b"\0")),
        _chunk(b"IEND", b""),
    ])  # fmt: skip


async def test_a_decompression_bomb_is_an_image_that_cannot_be_read() -> None:
    url = f"data:image/png;base64,{base64.b64encode(bomb()).decode()}"
    with pytest.raises(InvalidRequest) as bad:
        await load_images([ImageRef(url, PART)], None)
    assert bad.value.code == "invalid_image_format" and bad.value.param == PART


async def test_the_log_names_no_secret_of_an_image_url(caplog: pytest.LogCaptureFixture) -> None:
    """A signed URL's query (its token) and the URL's user and password stay out of the log:
    scheme, host and path are enough to tell which image failed."""
    signed = "http://user:hunter2@127.0.0.1:9/cats/1.png?X-Amz-Signature=s3cr3t#frag"
    spaced = "http://127.0.0.1:9/cats/2.png?sig=s3cr3t too"  # no request line can carry it
    allowed = Fetcher(ImageHosts.parse(["127.0.0.1"]))
    with caplog.at_level(logging.INFO, logger="omni.service.vision_inputs"):
        for url, fetcher in ((signed, Fetcher()), (spaced, allowed)):
            with pytest.raises(InvalidRequest) as bad:
                await load_images([ImageRef(url, PART)], fetcher)
            assert bad.value.code == "failed_to_download_image"
    assert "http://127.0.0.1:9/cats/1.png (input[0].content[1]) not fetched" in caplog.text
    assert "http://127.0.0.1:9/cats/2.png (input[0].content[1]) not fetched" in caplog.text
    for secret in ("hunter2", "user", "s3cr3t", "Signature", "frag"):
        assert secret not in caplog.text
