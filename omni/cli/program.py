"""The `omni` program: its parser, made of each command group's, and `main`, which runs one
command and turns an OmniError into one line and an exit status."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

import omni
from omni.cli import cache, db, logs, models, serve, serve_flags
from omni.cli.inspect import parsers as inspection
from omni.cli.options import Parser, db_default, omni_home
from omni.errors import OmniError
from omni.location import normal

DESCRIPTION = (
    "`omni serve` and `omni db upgrade`. Start-up failures are one clear line, not a traceback."
)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="omni", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"omni {omni.__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    serve_flags.add_serve(sub)
    db_file = db_default()
    db.add_parsers(sub, db_file)
    inspection.add_parsers(sub, db_file)
    models.add_parsers(sub)
    cache.add_parsers(sub)
    feats = sub.add_parser("features", help="what this install can serve, and how to add the rest")
    feats.add_argument("--json", action="store_true", help="one JSON object per feature")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if hasattr(args, "db"):  # a plain path or URL from here on (sqlite:///x.db → x.db)
        try:
            args.db = normal(str.__str__(args.db))
        except OmniError as exc:
            print(f"omni: error: {exc.message}", file=sys.stderr)
            return 2
    level = getattr(args, "log_level", "info").upper()
    if args.command == "serve":  # the process is the server's: its log is all ours
        try:
            logs.setup(level, args.log_format, args.log_file)
        except (OSError, ValueError) as exc:  # a file it cannot open; OMNI_LOG_FORMAT=xml
            print(f"omni: error: {exc}", file=sys.stderr)
            return 1
    else:  # `omni db …` may run inside another program: leave its logging as it is
        logging.basicConfig(level=level, format=logs.TEXT)
    try:
        return COMMANDS[args.command](args)
    except OmniError as exc:
        print(f"omni: error: {exc.message}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace) -> int:
    serve.serve(args)
    return 0


def _models(args: argparse.Namespace) -> int:
    return models.run(args, omni_home())


def _cache(args: argparse.Namespace) -> int:
    return cache.run(args, omni_home())


def _features(args: argparse.Namespace) -> int:
    from omni import features

    every = features.every()
    named = max(len(str(f["name"])) for f in every)
    width = max(len(str(f["serves"])) for f in every)
    for facts in every:
        if args.json:
            print(json.dumps(facts))
        else:
            state = "yes" if facts["available"] else f"no: {facts['reason']}"
            print(f"{facts['name']:<{named}}  {facts['serves']:<{width}}  {state}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "db": db.run,
    "models": _models,
    "cache": _cache,
    "features": _features,
    **dict.fromkeys(inspection.COMMANDS, inspection.run),
}
