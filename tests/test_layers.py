"""Imports point down only (api → server, lifecycle → service → projections/protocol/events →
schemas; the MLX runtime → protocol → tools → ports: tools and their grammar lie below all who
use them), MLX is imported only by the runtime (and the tiny test models of omni.testing) and
SQLAlchemy only by the event store (and its migrations) and the inspector's reads. The service
and the API reach a runtime only through omni.ports (the Model protocol and a port per
modality, jobs and their outputs): never its internals, and never for an event's name
(omni.vocabulary)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "omni"

# What each layer may import from omni (besides itself and the leaf modules errors/ids/heap).
ALLOWED = {
    "schemas": set(),
    "events": set(),
    "ports": set(),  # what a service may ask of a runtime: below both
    "tools": {"schemas", "ports"},  # which tools, their grammar, calls read out of text
    "projections": {"schemas"},
    "protocol": {"schemas", "ports", "tools"},
    "runtime": {"schemas", "protocol", "ports", "tools"},
    "testing": set(),  # tiny random-weight models for tests and benchmarks
    "service": {"schemas", "projections", "protocol", "tools", "events", "ports"},
    "inspect": {"schemas", "projections"},  # reads for people (the CLI, /inspect)
    "lifecycle": {"service", "events"},  # what every endpoint asks before it starts work
    "server": {"service", "events", "db", "lifecycle", "ports"},  # the composition root
    "api": {"schemas", "service", "events", "protocol", "db", "inspect", "ports", "server",
            "lifecycle"},
    "cli": {"api", "service", "runtime", "events", "inspect", "db"},  # the top: runs them all
}  # fmt: skip
LEAVES = {
    "catalogue", "errors", "features", "heap", "ids", "image_hosts", "location", "lock",
    "metrics", "settings", "vocabulary",
}  # fmt: skip


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "omni":  # `from omni import features` imports omni.features
                names.update(f"omni.{alias.name}" for alias in node.names)
    return names


def layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if layer(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    own = layer(path)
    for name in imports(path):
        parts = name.split(".")
        if parts[0] != "omni" or len(parts) == 1:
            continue
        target = parts[1]
        assert target == own or target in LEAVES or target in ALLOWED[own], (
            f"{path.relative_to(PACKAGE)} imports {name}"
        )


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_mlx_and_sqlalchemy_stay_in_their_layers(path: Path) -> None:
    top = {name.split(".")[0] for name in imports(path)}
    if "mlx" in top or "mlx_lm" in top:
        assert layer(path) in ("runtime", "testing"), f"{path} imports MLX"
    if "sqlalchemy" in top:  # omni/location.py only parses URLs with it
        held = ("events", "migrations", "inspect", "location")
        assert layer(path) in held, f"{path} imports SQLAlchemy"


EVENTS = PACKAGE / "events"
BACKENDS = ("sqlite", "postgres")


@pytest.mark.parametrize(
    "path", sorted(EVENTS.rglob("*.py")), ids=lambda p: str(p.relative_to(EVENTS))
)
def test_the_log_backends_stand_apart(path: Path) -> None:
    """omni/events/sqlite and omni/events/postgres are twins on the parts the package shares:
    neither imports the other, and only the package's face and backends.py (which picks one
    for a --db) import either."""
    rel = path.relative_to(EVENTS)
    own = rel.parts[0] if len(rel.parts) > 1 else None
    for name in imports(path):
        parts = name.split(".")
        if parts[:2] != ["omni", "events"] or len(parts) < 3 or parts[2] not in BACKENDS:
            continue
        if own is None:
            assert rel.name in ("__init__.py", "backends.py"), f"events/{rel} imports {name}"
        else:
            assert parts[2] == own, f"events/{rel} imports {name}"
