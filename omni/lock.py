"""One server per database: an OS advisory lock on `<db>.lock`, held for the server's life
(on PostgreSQL, an advisory lock of the database: PostgresLock).

The OS releases it when the process dies, however it dies, so a `kill -9` leaves nothing that
blocks a restart. The file holds the holder's pid, for the refusal's message.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from pathlib import Path

from omni.errors import DatabaseInUse, StoreError


class DatabaseLock:
    """Held from `acquire` until `release` (or the process's end)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, db_path: str) -> DatabaseLock:
        """Lock the database at db_path for this process; DatabaseInUse if a live process has."""
        path = Path(db_path + ".lock")
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot lock database {db_path}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise DatabaseInUse(
                    f"database {db_path} is in use by another omni serve (pid {holder}); "
                    "stop it first, or give this one another --db"
                ) from None
            if _same_file(path, fd):
                break
            # A holder that stopped removed the file between our open and our lock: the lock
            # is on a file nobody else will open. Take the one at the path now.
            os.close(fd)
        lock = cls(path, fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            lock.release()
            raise StoreError(f"cannot lock database {db_path}: {exc.strerror}") from None
        return lock

    def release(self) -> None:
        """Remove the file, then unlock: one who opened it meanwhile sees it gone and retries."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def _same_file(path: Path, fd: int) -> bool:
    try:
        return path.stat().st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


# The session-level advisory locks live servers hold on a PostgreSQL log: one per replica id,
# (SERVER_LOCKS, crc32 of the id), so replicas share the log and one id serves once.
SERVER_LOCKS = 0x6F6D6E69 & 0x7FFFFFFF  # "omni"


class PostgresLock:
    """One server per replica id on a PostgreSQL log (replicas share it by leases: a second
    server with the same id would renew the first one's leases as its own): a session-level
    advisory lock, held by a connection of its own for the server's life. PostgreSQL
    releases it when that connection ends, however the process dies (a `kill -9` too)."""

    def __init__(self, conn: object) -> None:
        self._conn: object | None = conn

    @classmethod
    def acquire(cls, url: str, replica: str) -> PostgresLock:
        from omni.db_postgres import connect
        from omni.location import shown

        key = zlib.crc32(replica.encode()) - (1 << 31)  # an int4
        name = f"omni serve {replica}"
        conn = connect(url, autocommit=True, application_name=name[:63])
        try:
            got = conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (SERVER_LOCKS, key)
            ).fetchone()
            if got is None or not got[0]:
                raise DatabaseInUse(
                    f"replica {replica!r} already serves database {shown(url)}; stop it"
                    " first, or give this one another --replica-id"
                )
        except BaseException:
            conn.close()
            raise
        return cls(conn)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # type: ignore[attr-defined]
