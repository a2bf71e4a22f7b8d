"""Where the server's log records go (stderr or a file) and how they read: a line of text, or
one JSON object a line for log shippers. Access lines carry their fields as JSON keys."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        out = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup(level: str, fmt: str = "text", file: str | None = None) -> None:
    """Replace the root logger's handlers with one writing `fmt` lines to `file` (or stderr)."""
    if fmt not in FORMATS:
        raise ValueError(
            f"log format {fmt!r} (--log-format or OMNI_LOG_FORMAT): expected text or json"
        )
    handler: logging.Handler
    if file:
        handler = logging.FileHandler(file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
