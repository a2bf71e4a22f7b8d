"""Prompts, rendered off the event loop one at a time, refused early when they cannot fit.

Rendering and tokenizing are CPU work in proportion to the request: on the event loop a large
request would stall every other client (and /health). One worker thread takes them in turn, so
at most one request's tokens are being built at once; a text longer than the context could
hold even at the tokenizer's longest token is refused before any tokenizing.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from omni.errors import InvalidRequest
from omni.ports.chat import Engine

T = TypeVar("T")

# Normalizers may shrink text a little (NFKC, stripped spaces): the floor is halved for them.
SHRINK = 2


# One piece of prompt work: the loop that waits, its future, the call.
_Work = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    Callable[..., Any],
    tuple[Any, ...],
    dict[str, Any],
]


class Prompter:
    """Runs prompt work on one thread of its own, in order of arrival.

    A queue and a future, not an executor: run_in_executor's concurrent future, the lock and
    callbacks that chain it to the loop's own were most of what a hop cost the event loop,
    which takes every request in."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None  # started by the first work
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")  # as an executor
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="omni-prompt", daemon=True)
            self._thread.start()
        self._queue.put((loop, done, fn, args, kwargs))
        return await done

    def _serve(self) -> None:
        while (work := self._queue.get()) is not None:
            loop, done, fn, args, kwargs = work
            if done.cancelled():  # its caller is gone: nobody wants it any more
                continue
            try:
                result, error = fn(*args, **kwargs), None
            except BaseException as exc:  # the caller's, as an executor hands it back
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, done, result, error)
            except RuntimeError:  # the loop is closed: nobody waits
                pass

    def close(self) -> None:
        """Work not begun is cancelled; the thread ends after the one it is doing."""
        self._closed = True
        while True:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                break
            if work is not None:
                try:
                    work[0].call_soon_threadsafe(work[1].cancel)
                except RuntimeError:  # its loop is closed: nobody waits
                    pass
        self._queue.put(None)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


def token_floor(engine: Engine, nbytes: int) -> int:
    """Fewer tokens than this cannot carry `nbytes` bytes of text."""
    return nbytes // (SHRINK * max(1, engine.capabilities.max_token_bytes))


def text_bytes(messages: Sequence[dict[str, Any]]) -> int:
    """The bytes of the messages' text, which every template renders whole."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.encode())
        elif isinstance(content, list):
            total += sum(
                len(str(p.get("text") or "").encode()) for p in content if isinstance(p, dict)
            )
    return total


def refuse_unfittable(engine: Engine, nbytes: int, param: str) -> None:
    """A 400 now, before tokenizing, for text the context certainly cannot hold."""
    floor = token_floor(engine, nbytes)
    if floor >= engine.capabilities.context_length:
        raise InvalidRequest(
            f"The input is at least {floor} tokens ({nbytes} bytes of text); this model's "
            f"context is {engine.capabilities.context_length} tokens.",
            param=param,
            code="context_length_exceeded",
        )


def fit_suffix(
    engine: Engine,
    sizes: Sequence[int],
    render: Callable[[int], list[int]],
    fixed: int = 0,
    param: str = "input",
) -> list[int]:
    """The prompt of the longest suffix of items that fits: `render(start)` renders the items
    from `start` on and raises context_length_exceeded when they do not fit; `sizes` are the
    items' text bytes, `fixed` those of text always there (instructions). Items the byte floor
    rules out go unrendered; the rest are searched by bisection, so a conversation of n items
    costs O(log n) renders, not n."""
    n = len(sizes)
    start, remaining = 0, fixed + sum(sizes)
    while start < n - 1 and token_floor(engine, remaining) >= engine.capabilities.context_length:
        remaining -= sizes[start]
        start += 1
    refuse_unfittable(engine, remaining, param)
    last = n - 1  # the newest item alone is the shortest prompt there is
    try:
        return render(start)
    except InvalidRequest as exc:
        if exc.code != "context_length_exceeded" or start >= last:
            raise
    best = render(last)  # raises when not even the newest item fits
    low, high = start, last  # render(low) does not fit, render(high) does
    while high - low > 1:
        middle = (low + high) // 2
        try:
            best, high = render(middle), middle
        except InvalidRequest as exc:
            if exc.code != "context_length_exceeded":
                raise
            low = middle
    return best
