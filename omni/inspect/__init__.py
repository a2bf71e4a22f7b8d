"""Inspection of the log for people: the queries behind `omni ls/show/tail/replay/stats` and
the web inspector, over a sync SQLAlchemy Connection."""

from __future__ import annotations

from omni.inspect.database import missing, open_log
from omni.inspect.reading import Inspector
from omni.inspect.records import KINDS, STATUSES, Detail, Stats, Summary, TimelineRow, iso

__all__ = [
    "KINDS",
    "STATUSES",
    "Detail",
    "Inspector",
    "Stats",
    "Summary",
    "TimelineRow",
    "iso",
    "missing",
    "open_log",
]
