"""What a long-lived process keeps for its whole life, set aside from the garbage collector.

A full collection walks every tracked object. With a tiny model on a 2-core CPU the server
holds ~157,000 (the modules, the tokenizer, Quart, SQLAlchemy) and one took 127 ms of the event
loop's time; with a 128k-token vocabulary on the H200's host, ~512,000 and 245-347 ms; the
engine process's, 36 and 218 ms of the decode loop's. Every stream waits meanwhile. They come
when enough new objects have outlived two younger collections: about once in 500 requests.
Frozen, what was alive at start-up is never walked again: 2-4 ms (bench/heap.py, in git history).
Those objects are still freed by reference counting; only a reference cycle among them would
now outlive the process's need of it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def set_aside(who: str) -> int:
    """Collect, then freeze what survives (gc.freeze): call once, when everything that lives as
    long as the process is loaded. Returns how many objects were set aside."""
    gc.collect()
    gc.freeze()
    count = gc.get_freeze_count()
    log.info("%s: %d objects set aside from the garbage collector", who, count)
    return count
