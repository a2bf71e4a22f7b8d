"""`omni cache ls` (the prefix caches kept on disk, per model) and `omni cache clear`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from omni.cli.tables import print_table, size


def add_parsers(sub: Any) -> None:
    cache = sub.add_parser("cache", help="the prefix (KV) caches kept on disk")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    ls = csub.add_parser("ls", help="list the entries")
    ls.add_argument("--json", action="store_true", help="one JSON object a line")
    clear = csub.add_parser("clear", help="remove the entries")
    for p in (ls, clear):
        p.add_argument("--model", metavar="ID", help="only this model's (its id, path or key)")
        p.add_argument("--dir", type=Path, help="the cache folder (default: OMNI_HOME/kv)")


def run(args: argparse.Namespace, home: Path) -> int:
    from omni.runtime.chat import kv_files

    root = Path(args.dir) if args.dir else home / "kv"
    if args.cache_command == "clear":
        count = kv_files.clear(root, args.model)
        whose = f" of {args.model}" if args.model else ""
        print(f"removed {count} {'entry' if count == 1 else 'entries'}{whose} from {root}")
        return 0
    rows = [
        {
            "model": e.model,
            "key": e.key,
            "namespace": e.side.namespace,
            "tokens": len(e.side.tokens),
            "bytes": e.side.nbytes,
            "tier": "disk",
            "last_use": e.last_use,
            "hits": e.side.hits,
        }
        for e in kv_files.listing(root, args.model)
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        _table(rows)
    return 0


def _table(rows: list[dict[str, Any]]) -> None:
    header = ("model", "key", "namespace", "tokens", "size", "tier", "last use", "hits")
    lines = [
        (
            row["model"],
            row["key"],
            row["namespace"] or "-",
            str(row["tokens"]),
            size(row["bytes"]),
            row["tier"],
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["last_use"])),
            str(row["hits"]),
        )
        for row in rows
    ]
    print_table(header, lines)
