"""The package as pip installs it from an sdist or a wheel, away from the source tree."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "omni" / "migrations").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
)
INSPECTOR = sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "omni" / "api" / "static").rglob("*") if p.is_file()
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build`: the sdist, then the wheel built from that sdist."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_sdist_and_the_wheel_carry_the_migrations(dist: Path) -> None:
    assert "omni/migrations/script.py.mako" in MIGRATIONS and len(MIGRATIONS) >= 4
    assert "omni/api/static/inspect/index.html" in INSPECTOR  # and the inspector's pages
    (sdist,) = dist.glob("omni_mlx-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert set(MIGRATIONS) <= names and set(INSPECTOR) <= names
    (wheel,) = dist.glob("omni_mlx-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "Name: omni-mlx\n" in whl.read(meta).decode()
        assert "omni = omni.cli:main" in whl.read(entry_points).decode()
    assert set(MIGRATIONS) <= names and set(INSPECTOR) <= names
    assert not {n for n in names if n.split("/")[0] in ("migrations", "tests", "bench")}


def test_an_installed_wheel_upgrades_a_database_without_the_tree(
    dist: Path, tmp_path: Path
) -> None:
    target = tmp_path / "site"
    (wheel,) = dist.glob("omni_mlx-*.whl")
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target)]
    done = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    # The installed copy first on the path (ahead of an editable install); run from a folder
    # that has no alembic.ini, no migrations, no omni/.
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = "import omni, sys; from omni.cli import main; print(omni.__file__); sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "db", "upgrade", "--db", "omni.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=work,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(target / "omni" / "__init__.py")
    with sqlite3.connect(work / "omni.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"events", "chat_cache", "alembic_version"} <= tables
