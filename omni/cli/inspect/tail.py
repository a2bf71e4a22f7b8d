"""`omni tail [ID]`: new events as the server commits them, by polling the log's positions
(a reader of the file cannot be woken by the server). Ctrl-C ends it, with status 0."""

from __future__ import annotations

import argparse
import sys
import time

from omni.cli.inspect.digest import Digest
from omni.cli.inspect.output import Out
from omni.cli.inspect.reading import inspector, unknown
from omni.inspect import Inspector, open_log
from omni.location import shown
from omni.vocabulary import COMPLETION_ENDS, MESSAGE_ENDS, RESPONSE_ENDS

ENDS = RESPONSE_ENDS | COMPLETION_ENDS | MESSAGE_ENDS


SUMMARY_S = 1.0  # --summary: a line a stream this often


def tail(args: argparse.Namespace) -> int:
    out = Out()
    digest = Digest() if args.summary else None
    try:
        return _follow(args.db, args.id, args.interval, out, digest)
    except KeyboardInterrupt:
        return 0


def _follow(
    path: str, object_id: str | None, interval: float, out: Out, digest: Digest | None
) -> int:
    with inspector(path) as ins:  # the checks, once: not Omni's, too old, an unknown id
        if object_id is not None and ins.kind(object_id) is None:
            raise unknown(object_id, path)
        # One object: from its start, until it ends. Everything: from now on.
        position = 0 if object_id is not None else ins.last_position()
    what = object_id or "every stream"
    print(f"omni: following {what} in {shown(path)} (Ctrl-C ends)", file=sys.stderr, flush=True)
    engine = open_log(path)
    told = time.monotonic()
    try:
        while True:
            # A connection a poll: it sees every commit, and the file's mode as it is now
            # (a server started or stopped meanwhile).
            with engine.connect() as conn:
                rows = Inspector(conn).since(position, object_id)
            for at, e in rows:
                position = at
                if digest is None:
                    out.event(e.time, e.stream_id, e.seq, e.type, e.text)
                else:
                    digest.add(e)
                if object_id is not None and e.stream_id == object_id and e.type in ENDS:
                    _summed(out, digest)
                    return 0
            if digest is not None and time.monotonic() - told >= SUMMARY_S:
                _summed(out, digest)
                told = time.monotonic()
            if not rows:
                time.sleep(interval)
    finally:
        engine.dispose()


def _summed(out: Out, digest: Digest | None) -> None:
    if digest is not None:
        stamp = time.strftime("%H:%M:%S")
        for line in digest.lines():
            out.line(f"{stamp} {line}")
