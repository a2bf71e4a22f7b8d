"""The inspection commands on `omni`'s parser, and the one that runs a command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from omni.cli.inspect.commands import ls, replay, show, stats
from omni.cli.inspect.tail import tail
from omni.cli.options import DB_HELP, parsed
from omni.errors import InvalidRequest
from omni.events.maintenance import parse_duration
from omni.inspect import KINDS, STATUSES
from omni.inspect.search import SORTS, moment

COMMANDS = {"ls": ls, "show": show, "tail": tail, "replay": replay, "stats": stats}


def add_parsers(sub: Any, default_db: str) -> None:
    """The commands, on `omni`'s subparsers."""

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_)
        p.add_argument("--db", default=default_db, help=DB_HELP)
        return p

    p = command("ls", "recent responses, completions, embeddings, speech and images, one line each")
    p.add_argument("--status", choices=STATUSES, help="only this status")
    p.add_argument("--kind", choices=KINDS, help="only this kind of object")
    p.add_argument("--model", help="only this model")
    p.add_argument("--owner", help="only what this API key (by its name) made")
    p.add_argument("--since", type=parsed(when), metavar="WHEN", help=f"created since: {_WHEN}")
    p.add_argument("--until", type=parsed(when), metavar="WHEN", help=f"created before: {_WHEN}")
    p.add_argument(
        "-q", "--search", metavar="WORDS", help="whose input or output holds these words"
    )
    p.add_argument(
        "--sort",
        choices=tuple(SORTS),
        default="newest",
        help="newest or oldest first; longest or most tokens first",
    )
    p.add_argument("--limit", type=_positive, default=20, help="at most this many")

    p = command("show", "one response or completion: request, usage, timings, output")
    p.add_argument("id")
    p.add_argument("--events", action="store_true", help="with its full event timeline")
    p.add_argument("--json", action="store_true", help="as JSON, for machines")

    p = command("tail", "follow new events live as the server commits them (Ctrl-C ends)")
    p.add_argument("id", nargs="?", help="one response or completion (from its start)")
    p.add_argument(
        "--interval", type=_seconds, default=0.2, help="seconds between looks at the log"
    )
    p.add_argument(
        "--summary",
        action="store_true",
        help="a line a second for each busy stream, not each event",
    )

    p = command("replay", "print the exact SSE bytes a streaming client got")
    p.add_argument("id")

    p = command("stats", "counts by status and model, tokens, TTFT and tokens/s percentiles")
    p.add_argument("--since", type=parsed(when), metavar="WHEN", help=f"created since: {_WHEN}")
    p.add_argument("--json", action="store_true", help="as JSON, for machines")


def run(args: argparse.Namespace) -> int:
    """Run one inspection command; its exit status. A reader that stops reading (`| head`)
    ends the command quietly, as it ends `cat`."""
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        # Python would report the unflushed stdout at exit: point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as the shell reports a command killed by it


_WHEN = "a duration ago (30m, 2h, 1d) or an ISO time (2026-12-05T14:30Z; UTC unless it says)"


def when(text: str) -> int:
    """A time as unix ms: a duration before now, or an ISO 8601 time."""
    try:
        return int((time.time() - parse_duration(text)) * 1000)
    except ValueError:
        pass
    try:
        return moment(text, "when")
    except InvalidRequest:
        raise ValueError(
            f"{text!r}: expected a duration such as 30m, 2h or 1d, or an ISO time"
        ) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of seconds")
    return value
