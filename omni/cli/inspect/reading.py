"""The log opened for the inspection commands: refused with one line when it is not an Omni
log, or one whose schema predates the inspector's views (the CLI never migrates a log)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omni import db
from omni.errors import NotFound, StoreError
from omni.inspect import Inspector, missing, open_log
from omni.location import is_postgres, shown


@contextmanager
def inspector(path: str) -> Iterator[Inspector]:
    """An Inspector on the log at `path` (a file or a URL), read-only."""
    if not is_postgres(path) and not Path(path).exists():
        raise StoreError(f"no database at {path} (give --db the server's log)")
    revision = db.inspect(path, verify=False)  # not SQLite, not ours, too new: refused here
    where = shown(path)
    if revision is None:
        raise StoreError(f"{where} holds no Omni log (give --db the server's log)")
    engine = open_log(path)
    try:
        with engine.connect() as conn:
            lacking = missing(conn)
            if lacking:
                raise StoreError(
                    f"{where} is at schema {revision}, older than the inspector's views"
                    f" ({', '.join(lacking)}); run `omni db upgrade --db {path}`, or start"
                    " the server on it, which upgrades it"
                )
            yield Inspector(conn)
    finally:
        engine.dispose()


def unknown(object_id: str, path: str) -> NotFound:
    return NotFound(f"no response or completion {object_id!r} in {shown(path)}")
