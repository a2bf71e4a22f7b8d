"""The event log: its contract (append/read, the cache index), the SQLite and in-memory
stores, the notifier (wake-ups) and follow (catch up, then wait)."""

from omni.events.appender import Appender
from omni.events.contract import Append, CacheIndex, EventLog, NewEvent, Store, StoredEvent
from omni.events.follow import KEEPALIVE, follow, follow_pages
from omni.events.memory import MemoryStore
from omni.events.notifier import Notifier
from omni.events.store import EventStore

__all__ = [
    "KEEPALIVE",
    "Append",
    "Appender",
    "CacheIndex",
    "EventLog",
    "EventStore",
    "MemoryStore",
    "NewEvent",
    "Notifier",
    "Store",
    "StoredEvent",
    "follow",
    "follow_pages",
]
