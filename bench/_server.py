"""Shared pieces of the benchmarks: `omni serve` (or a peer) as a subprocess on a free loopback
port, the raw mlx-lm baselines in a process of their own, and their prompt tokens."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from omni.runtime.chat.worker import use_mlx_settings  # noqa: E402

# The raw mlx-lm baselines of every benchmark that imports this run with the MLX settings
# Omni's engine uses (MLX_CUDA_USE_CUDNN_SDPA=0: omni.runtime.chat.worker). Set in this process's
# environment, they reach the servers it starts too (Omni's engine, mlx_lm.server):
# every side of a ratio runs the same kernels.
use_mlx_settings()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(proc: subprocess.Popen[bytes], url: str, name: str) -> None:
    """Poll `url` until it answers 200; stop if the process exits or after ten minutes."""
    for _ in range(3000):
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with status {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"{name} did not come up")


def bench_omni_env() -> dict[str, str]:
    """BENCH_OMNI_ENV="NAME=value,...": settings for the server (and its engine) alone, not for
    the raw baselines that run in the bench's processes (e.g. an MLX setting to compare)."""
    pairs = os.environ.get("BENCH_OMNI_ENV", "").split(",")
    return dict(kv.split("=", 1) for kv in pairs if kv)


def start_omni(
    model_path: str,
    db_path: Path,
    *flags: str,
    env: dict[str, str] | None = None,
    stderr: Any = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """`omni serve` on `model_path` with its log at `db_path` (`env`: more settings for it;
    `stderr`: where its own stderr goes, a file, else this process's); returns the process and
    base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "omni", "serve", "--model", model_path, "--port", str(port)]
    cmd += ["--db", str(db_path), "--log-level", "warning", *flags]
    extra = bench_omni_env()
    proc = OmniProcess(
        cmd, env={**os.environ, "OMNI_ENGINE_STATS": "1", **extra, **(env or {})}, stderr=stderr
    )
    proc.base_url = base_url = f"http://127.0.0.1:{port}"
    wait_up(proc, f"{base_url}/health", "omni serve")
    return proc, base_url


class OmniProcess(subprocess.Popen[bytes]):
    """`omni serve`; with BENCH_METRICS=PATH, its /metrics is written to PATH as it stands
    when the bench stops it, so PATH holds what the whole run did."""

    base_url = ""

    def terminate(self) -> None:
        if (target := os.environ.get("BENCH_METRICS")) and self.poll() is None:
            try:
                Path(target).write_text(httpx.get(f"{self.base_url}/metrics", timeout=10).text)
            except httpx.HTTPError as exc:
                print(f"BENCH_METRICS: no scrape ({exc})", file=sys.stderr)
        super().terminate()


def model_or_tiny(model: str | None, folder: Path) -> tuple[str, str]:
    """(path, id) of --model, resolved as `omni serve` does; without one, a tiny random-weight
    llama (4 layers, 256 wide) built in `folder`."""
    from omni.cli.options import omni_home
    from omni.runtime.loading.source import resolve_model
    from omni.testing.llama import build_tiny_llama

    if model is None:
        return str(build_tiny_llama(folder / "tiny", layers=4, hidden=256)), "tiny"
    source = resolve_model(model, omni_home(), lambda m: print(m, file=sys.stderr))
    return source.path, source.model_id


def chat_body(model: str, text: str, max_tokens: int) -> dict[str, Any]:
    """A streamed, greedy chat completion of one user message, usage in its last chunk."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def engine_form(model: Any) -> Any:
    """`model` as Omni's engine runs it by default (in a process RawWorker started with
    like_engine): float32 weights on a CPU with an optimized BLAS, exp2 attention on a CPU;
    as loaded on a GPU."""
    from omni.runtime.chat.worker import as_run, on_gpu
    from omni.runtime.loading import weights
    from omni.runtime.platform import blas

    return as_run(model, weights.AUTO, None if on_gpu() else blas.in_use())


class RawWorker:
    """A raw mlx-lm baseline loaded in a process of its own beside the server, so that its
    runs can alternate with the server's (a machine whose speed drifts weighs on both alike).
    `target(conn, *args)` answers each message it receives on `conn` with one reply, and
    returns when it receives None. `like_engine`: the process starts as Omni's engine process
    does (omni.runtime.platform.gemv.engine_libraries), so that a target calling engine_form
    runs the engine's kernels."""

    def __init__(self, target: Any, *args: Any, like_engine: bool = False):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        from omni.runtime.platform import blas, gemv

        libraries = gemv.engine_libraries(blas.AUTO) if like_engine else nullcontext()
        with libraries as forwarder:
            self._proc.start()
        self._forwarder = forwarder  # its folder goes when the process is done
        child.close()  # the child's end lives in the child: its exit ends our recv

    def ask(self, message: Any) -> Any:
        self._conn.send(message)
        return self.reply()

    def reply(self) -> Any:
        try:
            return self._conn.recv()
        except EOFError:
            raise SystemExit(f"the raw baseline's process exited ({self._proc.exitcode})") from None

    def stop(self) -> None:
        try:
            self._conn.send(None)
        except OSError:  # gone already
            pass
        self._proc.join(120)
        if self._forwarder is not None:
            shutil.rmtree(self._forwarder.parent, ignore_errors=True)


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Prompt tokens through the chat template, as the server renders them."""
    tokens = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(tokens, dict) or hasattr(tokens, "input_ids"):  # transformers 5
        tokens = tokens["input_ids"]
    return list(tokens)


def cpu_seconds(pid: int) -> tuple[float, float, float]:
    """CPU seconds (user + system) used so far by process `pid`, by its descendants, and by
    its main thread alone (for `omni serve`: the server, its engine process, and the server's
    event loop). Linux /proc; zeros elsewhere."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def own(p: int | str) -> float:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    def children(p: int) -> list[int]:
        kids: list[int] = []
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids += [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                pass
        return kids

    below, todo = 0.0, children(pid)
    while todo:
        p = todo.pop()
        below += own(p)
        todo += children(p)
    return own(pid), below, own(f"{pid}/task/{pid}")


def split_cpus(spec: str) -> tuple[set[int], set[int]] | None:
    """The CPUs this process may run on, split in two: (the servers' and raw baselines', the
    load generator's), so that clients parsing thousands of SSE chunks a second do not take CPU
    time (or a hyperthread's sibling) from what they measure; on a real deployment the clients
    are elsewhere. `spec`: "auto" (with 8 CPUs or more, the clients get the second half of the
    physical cores, every hyperthread of each), "none" (no split), or the clients' CPUs as a
    list ("8-15" or "8,9,12-15"; the servers get the rest). Linux only; None where it does
    not apply."""
    if spec == "none" or not hasattr(os, "sched_getaffinity"):
        return None
    mine = os.sched_getaffinity(0)
    if spec != "auto":
        clients = set()
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            clients |= set(range(int(lo), int(hi or lo) + 1))
        if not clients < mine:
            raise SystemExit(f"--client-cpus {spec}: not a proper subset of CPUs {sorted(mine)}")
        return mine - clients, clients
    if len(mine) < 8:
        return None
    cores: dict[str, set[int]] = {}  # a physical core's hyperthreads, by its siblings list
    for cpu in mine:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            key = path.read_text().strip()
        except OSError:
            key = str(cpu)
        cores.setdefault(key, set()).add(cpu)
    groups = sorted(cores.values(), key=min)
    half = len(groups) // 2
    if half == 0:
        return None
    servers = set().union(*groups[: len(groups) - half])
    return servers, set().union(*groups[len(groups) - half :])


def cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
