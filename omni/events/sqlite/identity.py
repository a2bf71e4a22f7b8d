"""Which file the log is: SQLite goes on writing to a file deleted or replaced under it (the
open descriptors keep the old one), so every commit would be answered and lost at the next
start. The store checks the path's identity before each write and read, and stops for good
once it is not the file it opened."""

from __future__ import annotations

import logging
import os

from omni.errors import StoreUnavailable

log = logging.getLogger(__name__)

LOST = "The server's database is unavailable (its file was deleted or replaced); restart it."


class FileIdentity:
    """The device and inode of the file at `path` when the store opened it."""

    def __init__(self, path: str):
        self.path = path
        stat = os.stat(path)
        self._identity = (stat.st_dev, stat.st_ino)
        self.lost: str | None = None  # what happened to the file, once it is not ours

    def check(self) -> None:
        """StoreUnavailable if the path no longer names the file opened (a stat: ~1 µs)."""
        if self.lost is None:
            try:
                stat = os.stat(self.path)
            except FileNotFoundError:
                self._lose("deleted")
            except OSError as exc:
                self._lose(f"out of reach ({exc.strerror})")
            else:
                if (stat.st_dev, stat.st_ino) != self._identity:
                    self._lose("replaced by another file")
        self.raise_if_lost()

    def raise_if_lost(self) -> None:
        """StoreUnavailable if check() found the file gone (no system call)."""
        if self.lost is not None:
            raise StoreUnavailable(LOST)

    def _lose(self, what: str) -> None:
        self.lost = what
        log.error(
            "the database %s was %s while the server ran: nothing more is written to it or "
            "read from it, every request that needs it is refused (503); restart the server",
            self.path,
            what,
        )
