"""A generation whose events could not be written (the disk full, the file read-only) is
stopped, and its stream ended `failed` from what the log holds, once appends work again.

Its followers then read the ending like any other. Until then nothing of it commits (the
appender refuses a stream's appends past a failed one), so the log holds a prefix of what
was generated and the ending continues it exactly. If the server stops first, start-up
recovery ends the stream instead.
"""

from __future__ import annotations

import asyncio
import logging

from omni.errors import SeqConflict, StoreError, StoreUnavailable
from omni.events import Append, Appender, EventLog, NewEvent, StoredEvent
from omni.ports.jobs import Failed
from omni.projections.response import fold_response
from omni.protocol.chat_recorder import error_event
from omni.protocol.message_recorder import message_error
from omni.protocol.recorder import ResponseRecorder
from omni.service.streams import dumps
from omni.vocabulary import (
    COMPLETION_ENDS,
    ID_PREFIXES,
    MESSAGE,
    MESSAGE_ENDS,
    RESPONSE,
    RESPONSE_ENDS,
)

log = logging.getLogger(__name__)

UNWRITTEN = "The server could not write this generation's events to its database, so it stopped it."
FIRST_RETRY_S = 0.05
LAST_RETRY_S = 2.0  # the longest wait between tries: an ending lands within this of a repair


def ending(rows: list[StoredEvent], stream_id: str) -> list[NewEvent]:
    """The events that end a stream failed after `rows` (its log so far), by the kind its id
    names: a response's, a message's or a completion's; none if it has ended."""
    if stream_id.startswith(ID_PREFIXES[RESPONSE]):
        return _response_ending(rows)
    if stream_id.startswith(ID_PREFIXES[MESSAGE]):
        ends, (type_, data) = MESSAGE_ENDS, message_error(UNWRITTEN)
    else:
        ends, (type_, data) = COMPLETION_ENDS, error_event(UNWRITTEN)
    if rows and rows[-1].type in ends:
        return []
    return [NewEvent(type_, dumps(data))]


def _response_ending(rows: list[StoredEvent]) -> list[NewEvent]:
    if rows and rows[-1].type in RESPONSE_ENDS:
        return []
    if not rows:
        return []  # no opening in the log: nothing anyone could follow
    folded = fold_response([(r.type, r.data) for r in rows])
    events = ResponseRecorder.resume(folded, rows[-1].seq + 1).on_failed(Failed(UNWRITTEN))
    return [NewEvent(str(e["type"]), dumps(e)) for e in events]


async def end_unwritten(
    store: EventLog,
    appender: Appender,
    stream_id: str,
    closing: asyncio.Event | None = None,
) -> bool:
    """Append the ending of `stream_id`, trying again (backing off) while appends fail.
    False if it could not: the log's file is gone, or `closing` was set first."""
    wait = FIRST_RETRY_S
    while True:
        try:
            rows = await store.read(stream_id)
            events = ending(rows, stream_id)
            if events:
                await appender.append(Append(stream_id, rows[-1].seq + 1 if rows else 0, events))
                log.info("%s ended failed: its events could not all be written", stream_id)
            return True
        except StoreUnavailable:
            return False
        except SeqConflict:
            continue  # written meanwhile (it ended after all): read again
        except StoreError as exc:
            log.debug("ending %s failed: %s", stream_id, exc)
        try:
            if closing is None:
                await asyncio.sleep(wait)
            else:
                await asyncio.wait_for(closing.wait(), wait)
                return False
        except TimeoutError:
            pass
        wait = min(wait * 2, LAST_RETRY_S)
