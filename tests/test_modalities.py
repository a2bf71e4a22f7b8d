"""A modality is one registered unit: every kind of object the log records (its id prefix in
omni.vocabulary) has one service in the server's loop, a blueprint, a SQL view, and an
output and a request summary in the inspector's tables. A new kind that misses one fails here,
naming the part (CONTRIBUTING.md, "A new modality")."""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import get_type_hints

from omni import db
from omni.api.app import BLUEPRINTS
from omni.inspect import folding, records, requests
from omni.server import Server
from omni.vocabulary import ID_PREFIXES

# The SQL view (omni/migrations) that lists each kind's objects.
VIEWS = {
    "response": "responses",
    "chat": "chat_completions",
    "text": "chat_completions",  # legacy completions share the completions' view
    "embedding": "embeddings",
    "speech": "speeches",
    "image": "images",
    "transcription": "transcriptions",
    "message": "messages",
    "conversation": "conversations",
}

OBJECTS = {"chat": "chat.completion", "text": "text_completion"}


def _registered() -> dict[str, type]:
    """Server.modalities, read off the class: each registered field's name and its type."""
    hints = get_type_hints(Server)
    names = Server.modalities.fget(SimpleNamespace(**{f.name: f.name for f in fields(Server)}))  # type: ignore[attr-defined]
    return {name: hints[name] for name in names}


def test_every_kind_is_recorded_by_exactly_one_registered_service() -> None:
    kinds = [kind for service in _registered().values() for kind in service.kinds]
    assert sorted(kinds) == sorted(ID_PREFIXES), "a kind without a service in Server.modalities"


def test_every_service_the_server_holds_is_in_its_loop() -> None:
    hints = get_type_hints(Server)
    held = {f.name for f in fields(Server) if isinstance(hints[f.name], type)
            and hasattr(hints[f.name], "kinds")}  # fmt: skip
    assert held == set(_registered()), "a service recovered and closed by no loop"


def test_every_service_has_a_blueprint_of_its_own() -> None:
    services = {service.__module__.rsplit(".", 1)[1] for service in _registered().values()}
    blueprints = {module.__name__.rsplit(".", 1)[1] for module in BLUEPRINTS}
    # Chat and legacy completions are one service (completions) behind the chat blueprint.
    assert services - {"completions"} <= blueprints
    assert "chat" in blueprints


def test_every_kind_has_a_view(tmp_path: Path) -> None:
    assert set(VIEWS) == set(ID_PREFIXES), "a kind without a view"
    path = tmp_path / "omni.db"
    db.upgrade(str(path))
    with sqlite3.connect(path) as conn:
        views = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='view'")}
    assert set(VIEWS.values()) <= views


def test_every_kind_has_an_output_and_a_request_summary_in_the_inspector() -> None:
    # The views name a completion's object as its API does; every other kind as the log does.
    objects = {OBJECTS.get(kind, kind) for kind in ID_PREFIXES}
    assert set(records.KINDS) == objects, "a kind the inspector cannot list"
    assert set(folding.OUTPUTS) == objects, "a kind the inspector cannot show"
    assert set(requests.SUMMARIES) == objects, "a kind the inspector cannot summarize"
