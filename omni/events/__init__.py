"""The event log: its contract (append/read, the cache index, the leases), the appender, the
notifier (wake-ups), follow (catch up, then wait) and the in-memory store; its SQL backends
in sqlite/ and postgres/, each with the same files for the same roles (store, connections,
cache, leases, maintenance), on the parts both share here (schema, reads, cache, leases,
maintenance, checks, driver)."""

from omni.events.appender import Appender
from omni.events.contract import Append, CacheIndex, EventLog, NewEvent, Store, StoredEvent
from omni.events.follow import KEEPALIVE, follow, follow_pages
from omni.events.memory import MemoryStore
from omni.events.notifier import Notifier
from omni.events.sqlite.store import EventStore

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
