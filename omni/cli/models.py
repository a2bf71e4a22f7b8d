"""`omni models` (the catalogue, what a running server has loaded, size on disk) and
`omni models pull NAME`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from omni.cli.catalogue import catalogue, env_list
from omni.cli.options import env
from omni.cli.tables import print_table, size
from omni.errors import OmniError

DEFAULT_URL = "http://127.0.0.1:10240"


def add_parsers(sub: Any) -> None:
    models = sub.add_parser("models", help="the models a server can serve")
    models.add_argument("--models-dir", action="append", default=env_list("MODELS_DIR"),
                        metavar="DIR", help="as `omni serve --models-dir`")  # fmt: skip
    models.add_argument("--no-hf-cache", action="store_true", help="leave out the HF cache")
    models.add_argument(
        "--url",
        default=env("URL", DEFAULT_URL),
        help="a running server, asked what it has loaded (default: %(default)s)",
    )
    models.add_argument("--json", action="store_true", help="one JSON object a line")
    msub = models.add_subparsers(dest="models_command")
    pull = msub.add_parser("pull", help="fetch a model: a default by its id, or a HF repo id")
    pull.add_argument("name", help="e.g. smollm2-135m-instruct, all-minilm-l6-v2, owner/repo")


def run(args: argparse.Namespace, home: Path) -> int:
    if args.models_command == "pull":
        return _pull(args.name, home)
    entries, _ = catalogue(args, home)
    served = _served(args.url)
    loaded = None if served is None else {m["id"] for m in served if m.get("loaded")}
    rows = [
        {
            "id": e.id,
            "kind": e.kind,
            "origin": e.origin,
            "loaded": None if loaded is None else e.id in loaded,
            "size_bytes": e.size_bytes,
            "path": e.path,
        }
        for e in entries
    ]
    # What the server serves from folders this command was not told of (its --models-dir).
    known = {e.id for e in entries}
    rows += [
        {
            "id": m["id"],
            "kind": m.get("kind", "chat"),
            "origin": m.get("origin", "server"),
            "loaded": bool(m.get("loaded")),
            "size_bytes": m.get("size_bytes"),
            "path": None,
        }
        for m in served or []
        if m.get("id") not in known
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    _table(rows, loaded is not None)
    return 0


def _table(rows: list[dict[str, Any]], asked: bool) -> None:
    """A table on a terminal, plain aligned columns when piped."""
    header = ("id", "kind", "origin", "loaded", "size", "path")
    lines = [
        (
            row["id"],
            row["kind"],
            row["origin"],
            "?" if not asked else ("yes" if row["loaded"] else "no"),
            "not fetched" if row["size_bytes"] is None else size(row["size_bytes"]),
            row["path"] or "-",
        )
        for row in rows
    ]
    print_table(header, lines)
    if not asked:
        print("(no server answered: what is loaded is not known)", file=sys.stderr)


def _served(url: str) -> list[dict[str, Any]] | None:
    """The models a running server lists (/v1/models), or None if none answers."""
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/models")
    if key := os.environ.get("OMNI_API_KEY"):
        request.add_header("Authorization", f"Bearer {key.split(',')[0].strip()}")
    try:
        with urllib.request.urlopen(request, timeout=2) as res:
            data = json.load(res)["data"]
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return None
    return [m for m in data if isinstance(m, dict) and "id" in m]


def _pull(name: str, home: Path) -> int:
    from omni.runtime.embeddings import default as default_embedding
    from omni.runtime.loading import default_model
    from omni.runtime.transcription import default as default_transcription

    def say(message: str) -> None:
        print(f"omni: {message}", file=sys.stderr, flush=True)

    if name == default_model.DEFAULT_MODEL_ID:
        path = default_model.ensure_default_model(home, say)
    elif name == default_embedding.DEFAULT_EMBEDDING_ID:
        from omni.runtime.embeddings.default import ensure_default_embedding

        path = ensure_default_embedding(home, say)
    elif name == default_transcription.DEFAULT_TRANSCRIPTION_ID:
        path = default_transcription.ensure_default_transcription(home, say)
    elif "/" in name:
        from omni.runtime.loading.hub import fetch

        path = fetch(name, say)
    else:
        raise OmniError(
            f"cannot pull {name!r}: name a default ({default_model.DEFAULT_MODEL_ID}, "
            f"{default_embedding.DEFAULT_EMBEDDING_ID}, "
            f"{default_transcription.DEFAULT_TRANSCRIPTION_ID}) or a Hugging Face repo id "
            "(owner/name)"
        )
    print(path)
    return 0
