"""The request's body, read on the handler's own task."""

from __future__ import annotations

import asyncio

from quart import request
from werkzeug.exceptions import RequestTimeout


async def body_bytes() -> bytes:
    """The request's body once all of it is in: a 408 past Quart's BODY_TIMEOUT, a 413 past
    its MAX_CONTENT_LENGTH, as Quart's get_data has them. get_data waits through
    asyncio.wait_for, which runs the wait as a task of its own from the loop's next turn: every
    request paid for both, though a JSON body has mostly come with its headers."""
    try:
        async with asyncio.timeout(request.body_timeout):
            data: bytes = await request.body
            return data
    except TimeoutError as exc:
        raise RequestTimeout() from exc
