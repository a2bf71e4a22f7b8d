"""Start-up: what clients asked not to store and an earlier process left in the log goes.

A running server purges an unstored response or completion once its client has read it; one
that stopped first (a crash, a stop mid-stream, a client that never came back for its
stream) leaves it behind. Nobody can read it any more: its client went with that process.
"""

from __future__ import annotations

import logging

from omni.events import EventLog
from omni.events.maintenance import PER_TRANSACTION
from omni.service.leasing import Leasing
from omni.vocabulary import ACCEPTED

log = logging.getLogger(__name__)

# What the accepted request of an unstored object says: `store: false`, the client's or the
# server's default (recorded decided). A fact without `store` is kept (streams.kept).
UNSTORED = (("$.body.store", False),)


async def purge_unstored(store: EventLog, leasing: Leasing | None = None) -> int:
    """Purge every unstored object in the log (and so its bytes) that no other server still
    serves (`leasing`: this server's, where the log is shared); returns how many."""
    doomed = [s.removesuffix("/request") for s in await store.streams_with(ACCEPTED, UNSTORED)]
    async with (leasing or Leasing()).taking(doomed) as taken:
        for start in range(0, len(taken), PER_TRANSACTION):
            await store.purge_objects(taken[start : start + PER_TRANSACTION])
    if taken:
        log.info("purged %d unstored responses and completions left by a stop", len(taken))
    return len(taken)
