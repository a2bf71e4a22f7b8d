"""follow(): the only way any client reads a stream: catch up, then wait for wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Final, ParamSpec

from omni.events.contract import EventLog, StoredEvent
from omni.events.notifier import Notifier

KEEPALIVE: Final = None  # yielded when nothing arrived within the keep-alive interval
P = ParamSpec("P")


async def follow_pages(
    store: EventLog,
    notifier: Notifier,
    stream_id: str,
    after: int,
    is_terminal: Callable[[StoredEvent], bool],
    keepalive: float = 15.0,
    page: int = 512,
    ends_at_stop: bool = False,
) -> AsyncGenerator[list[StoredEvent] | None, None]:
    """follow(), a read at a time: the events that were there together (never empty; the
    last page ends at the terminal event), so a stream can send them in one write.
    `ends_at_stop`: once the notifier is stopped, end after what is committed (a client's
    stream, which resumes at the next start), not at the terminal event alone."""
    checked_end = False
    with notifier.subscribe(stream_id) as wake:
        while True:
            wake.clear()  # clear first, then read: a commit after the read sets it again
            # Looked at before the read, as the wake-up is: a read after the stop has
            # everything committed before it.
            stopping = ends_at_stop and notifier.stopped
            rows = await store.read(stream_id, after, limit=page)
            for i, row in enumerate(rows):
                if is_terminal(row):
                    yield rows[: i + 1]
                    return
            if rows:
                yield rows
                after = rows[-1].seq
                continue  # more may be there already (a long replay is read page by page)
            if stopping:
                return
            if not checked_end and after >= 0:
                # Resuming at or past the end of a finished stream: nothing more will come.
                # Only the first time: afterwards a terminal event would come through `rows`.
                checked_end = True
                last = await store.last(stream_id)
                if last is not None and last.seq <= after and is_terminal(last):
                    return
            try:
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that lands as the
                # wake-up fires (likely, one a token), and a gone client's stream ran on.
                async with asyncio.timeout(keepalive):
                    await wake.wait()
            except TimeoutError:
                yield KEEPALIVE


def _row_by_row(
    pages: Callable[P, AsyncGenerator[list[StoredEvent] | None, None]],
) -> Callable[P, AsyncGenerator[StoredEvent | None, None]]:
    async def rows(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[StoredEvent | None, None]:
        """Yield events with seq > after, live, until a terminal event (inclusive).

        Yields KEEPALIVE (None) after `keepalive` seconds without news. Reads `page` rows at a
        time, so the first bytes of a long replay go out before the rest is read.
        """
        # Closed with this one: the subscription ends at once.
        async with aclosing(pages(*args, **kwargs)) as read:
            async for page in read:
                if page is KEEPALIVE:
                    yield KEEPALIVE
                    continue
                for row in page:
                    yield row

    return rows


# follow_pages() a row at a time, with the same arguments.
follow = _row_by_row(follow_pages)
