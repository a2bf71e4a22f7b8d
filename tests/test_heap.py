"""Both long-lived processes set aside what they keep for life from the garbage collector
(omni.heap), so that a full collection no longer walks the model, the tokenizer and the modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_cli import serving


def test_the_engine_process_sets_aside_its_model_before_it_reports_loaded(
    tiny_model_dir: Path,
) -> None:
    # worker.main in a thread of a fresh interpreter: its heap is this one's to inspect.
    code = f"""
import gc, os, threading
from multiprocessing import Pipe
from omni.runtime.chat import worker
from omni.runtime.chat.wire import Close, Loaded
from omni.settings import EngineSettings
ours, theirs = Pipe()
settings = EngineSettings(prompt_cache_entries=2, prompt_cache_bytes=1 << 20, max_batch=2)
thread = threading.Thread(target=worker.main, args=(theirs, {str(tiny_model_dir)!r}, settings))
thread.start()
assert isinstance(ours.recv(), Loaded)
frozen, left = gc.get_freeze_count(), len(gc.get_objects())
ours.send(Close())
thread.join(60)
print(frozen, left, flush=True)
os._exit(0)  # as omni serve does: tearing MLX down beside its threads can abort the process
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    frozen, left = map(int, done.stdout.split())
    assert frozen > 20_000  # mlx-lm, transformers' tokenizer, the model's modules
    assert left < frozen // 10  # what a full collection still walks


def test_the_server_sets_aside_its_heap_once_it_has_started(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    log = tmp_path / "serve.log"
    with serving(tiny_model_dir, tmp_path / "omni.db", "info", log):
        pass
    lines = [line for line in log.read_text().splitlines() if "set aside" in line]
    assert len(lines) == 1, log.read_text()
    count = int(lines[0].split("server: ", 1)[1].split()[0])
    assert count > 20_000
