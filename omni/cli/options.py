"""What every command's flags share: a flag's default from OMNI_<NAME>, numbers checked against
their range, help that ends with the default, the `--db` flag and OMNI_HOME."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from omni.location import shown
from omni.settings import ServerSettings

BIG = 2**63 - 1  # SQLite's largest integer
DB_HELP = "the event log: an SQLite file, or a postgresql:// URL"


def env(name: str, default: str | None) -> str | None:
    """OMNI_<name>, or `default` where it is unset or empty."""
    return os.environ.get(f"OMNI_{name}") or default


def switched(name: str) -> bool:
    """Whether OMNI_<name> turns an on/off flag on (1, true, yes; any case)."""
    return (env(name, "") or "").lower() in ("1", "true", "yes")


def add_switch(
    parser: argparse.ArgumentParser, flag: str, help: str, from_env: bool = True
) -> None:
    """An on/off flag, off unless given (or, `from_env`, turned on by OMNI_<FLAG>)."""
    name = flag.removeprefix("--").replace("-", "_").upper()
    default = switched(name) if from_env else False
    parser.add_argument(flag, action="store_true", default=default, help=help)


class Number(NamedTuple):
    """A numeric flag: a finite `kind` within [low, high]; `default` as the flag takes it
    (None: unset)."""

    flag: str
    kind: type
    low: float
    high: float
    default: str | None
    help: str | None = None


def add_number(parser: argparse.ArgumentParser, number: Number) -> None:
    """The flag, else OMNI_<FLAG> (--max-queued: OMNI_MAX_QUEUED), else its default; whichever
    it is must be a finite `kind` within [low, high]."""
    name = number.flag.removeprefix("--").replace("-", "_").upper()
    parser.add_argument(
        number.flag,
        type=_number(number.kind, number.low, number.high, name),
        default=env(name, number.default),
        help=number.help,
    )


def _number(kind: type, low: float, high: float, name: str) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` within [low, high], else a one-line usage error
    naming the range and where the value may have come from."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not low <= value <= high:
            bound = f"from {low} to {high}" if high < BIG else f"{low} or more"
            raise argparse.ArgumentTypeError(
                f"{text!r} (the flag or OMNI_{name}): expected {kind.__name__} {bound}"
            )
        return value

    return parse


def parsed(parse: Callable[[str], Any], where: str = "") -> Callable[[str], Any]:
    """An argparse type from a parser raising ValueError: its message, then `where`."""

    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}{where}") from None

    return parsed


def shown_default(value: float) -> str:
    """A default as its flag takes it (and help shows it): 86400, not 86400.0."""
    return f"{value:g}"


def listed(text: str | None) -> list[str]:
    """The items of a comma-separated list."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def flat(values: list[str]) -> tuple[str, ...]:
    """The items of a repeated flag whose values may be comma-separated lists."""
    return tuple(item for value in values for item in listed(value))


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's help ends with its default, where it has one (not for on/off switches)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """A parser whose subcommands (add_subparsers makes them of this class) show defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


class _Shown(str):
    """A `--db` default as help shows it: a URL's password never printed."""

    def __str__(self) -> str:
        return shown(str.__str__(self))


def db_default() -> str:
    server = ServerSettings.db_path
    return _Shown(env("DB", server) or server)


def omni_home() -> Path:
    return Path(env("HOME", None) or Path.home() / ".cache" / "omni").expanduser()
