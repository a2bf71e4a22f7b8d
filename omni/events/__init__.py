"""The event log: store (append/read), notifier (wake-ups), follow (catch up, then wait)."""

from omni.events.appender import Appender
from omni.events.follow import KEEPALIVE, follow, follow_pages
from omni.events.notifier import Notifier
from omni.events.store import Append, EventStore, NewEvent, StoredEvent

__all__ = [
    "KEEPALIVE",
    "Append",
    "Appender",
    "EventStore",
    "NewEvent",
    "Notifier",
    "StoredEvent",
    "follow",
    "follow_pages",
]
