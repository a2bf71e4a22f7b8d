"""Small builders shared by the event-log tests."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from omni.events import Append, NewEvent, StoredEvent

TERMINAL = frozenset({"response.completed", "response.failed", "response.cancelled"})


def is_terminal(event: StoredEvent) -> bool:
    return event.type in TERMINAL


def ev(type_: str = "response.output_text.delta", **data: object) -> NewEvent:
    return NewEvent(type_, json.dumps(data, separators=(",", ":")))


def deltas(stream_id: str, first_seq: int, n: int) -> Append:
    """n delta events for stream_id starting at first_seq; data records the seq."""
    return Append(
        stream_id,
        first_seq,
        [ev(stream=stream_id, seq=first_seq + i) for i in range(n)],
    )


def raw_rows(db_path: Path | str, stream_id: str | None = None) -> list[tuple]:
    """Read the table with the plain driver (a separate connection, not the store's)."""
    with sqlite3.connect(str(db_path)) as conn:
        if stream_id is None:
            cur = conn.execute(
                "SELECT position, stream_id, seq, type, data, created_at FROM events "
                "ORDER BY position"
            )
        else:
            cur = conn.execute(
                "SELECT position, stream_id, seq, type, data, created_at FROM events "
                "WHERE stream_id=? ORDER BY position",
                (stream_id,),
            )
        rows = cur.fetchall()
    conn.close()
    return rows


USAGE = "chat.completion.usage"
ACCEPTED = "omni.request.accepted"


def finished_chat(
    cid: str, key: str | None, *, store: bool = True, mirror_of: str | None = None
) -> list[Append]:
    """A chat completion's request and its whole stream (a chunk, the usage chunk), as the
    service writes them: the replay-cache index's triggers read exactly these fields."""
    request: dict[str, object] = {"kind": "chat", "body": {"store": store}, "key": key}
    if mirror_of is not None:
        request["mirror_of"] = mirror_of
    return [
        Append(f"{cid}/request", 0, [NewEvent(ACCEPTED, json.dumps(request))]),
        Append(cid, 0, [ev("chat.completion.chunk", id=cid), ev(USAGE, id=cid)]),
    ]


def finished_message(
    mid: str, key: str | None, *, store: bool = True, mirror_of: str | None = None
) -> list[Append]:
    """A message's request and its whole stream, as the service writes them (its last event,
    `message_stop`, is what indexes it for the replay cache, as a chat completion's usage)."""
    request: dict[str, object] = {"kind": "message", "body": {"store": store}, "key": key}
    if mirror_of is not None:
        request["mirror_of"] = mirror_of
    stream = [
        ev("message_start", type="message_start", message={"id": mid}),
        ev("message_delta", type="message_delta", delta={"stop_reason": "end_turn"}),
        ev("message_stop", type="message_stop"),
    ]
    return [
        Append(f"{mid}/request", 0, [NewEvent(ACCEPTED, json.dumps(request))]),
        Append(mid, 0, stream),
    ]
