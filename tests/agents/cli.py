"""Agent CLIs (Codex, Claude Code): from npm, pinned, installed once per machine
(OMNI_TEST_HOME, one install at a time: parallel workers share the folder), and run."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.machine import alone


def installed_version(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    if not manifest.is_file():
        return None
    return str(json.loads(manifest.read_text())["version"])


def npm_command(package: str, version: str, folder: str, command: str, what: str) -> Path:
    """The command `command` of `package`@`version`, installed into OMNI_TEST_HOME/`folder`
    unless that version is there already; `what` names the test that needs it."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.fail(f"{what} needs Node.js and npm on PATH (https://nodejs.org)")
    with alone() as home:  # one npm install at a time into the machine's folder
        prefix = home / folder
        if installed_version(prefix, package) != version:
            prefix.mkdir(parents=True, exist_ok=True)
            spec = f"{package}@{version}"
            done = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", spec],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                pytest.fail(f"npm install {spec} failed:\n{done.stderr}")
    return prefix / "node_modules" / ".bin" / command


def run_cli(
    cmd: list[str], cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], str]:
    """One run of an agent CLI, no input, its output kept; and the report a failed check
    prints (its exit status, stdout and stderr)."""
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
