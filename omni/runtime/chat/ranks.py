"""A sharded model's engine: its ranks started by MLX's own launcher (`mlx.launch`, with the
backend the settings name: ring over TCP, JACCL over Thunderbolt, MPI, NCCL), rank 0 on this
machine connecting back to the server. The server talks to rank 0 as to any engine process,
over a connection with the pipe's own interface (multiprocessing's, authenticated by a key
made for this start); the launcher's process stands for the engine's process."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from omni.runtime.loading.source import ModelSource
from omni.runtime.platform import gemv
from omni.settings import EngineSettings, Ranks

ADDRESS = "OMNI_RANK_SERVER"  # host:port of the server's listener, for rank 0
KEY = "OMNI_RANK_KEY"  # its authentication key, hex
# mlx.launch, as its own script runs it (its module has no __main__), by this interpreter. It
# forwards its stdin to every rank, a thread a rank selecting on that rank's stdin pipe, which
# is always writable: each thread spins. Omni sends the ranks no input, so its selects are
# asked of no writable pipe, and its own stdin is a pipe that stays empty (not /dev/null,
# which is always readable): idle, it sleeps.
LAUNCHER = (
    "import select, sys; from mlx._distributed_utils import launch; "
    "launch.select = lambda r, w, x, t: select.select(r, [], x, t); sys.exit(launch.main())"
)
ACCEPT_S = 600.0  # the longest the ranks may take to start and rank 0 to call back
EXITED = re.compile(r"rank (\d+) exited with code (-?\d+)")  # the launcher's own words


class Launched:
    """The launcher's process, as the engine handles its process (is_alive, join, terminate,
    exitcode); what the ranks wrote to stderr, the last lines kept for a failed start."""

    def __init__(self, popen: subprocess.Popen[bytes], hosts: list[str] | None = None) -> None:
        self.popen, self.hosts = popen, hosts
        self.pid = popen.pid
        self._tail: list[str] = []
        self._reader = threading.Thread(target=self._read, name="omni-ranks-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        for raw in self.popen.stderr:
            line = raw.decode(errors="replace").rstrip()
            print(line, file=sys.stderr, flush=True)  # the ranks' own lines, in the server's
            self._tail = [*self._tail[-19:], line]
        if self.popen.stdin is not None:  # the launcher is gone (its stderr ended)
            self.popen.stdin.close()

    def tail(self) -> str:
        return "\n".join(self._tail)

    def why(self) -> str:
        """Which ranks exited, on which hosts, as the launcher said; else its last lines."""
        return named(self._tail, self.hosts) or self.tail()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        """To the launcher and every rank it started on this machine (its process group)."""
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:  # all gone already
            pass

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()


def command(ranks: Ranks, address: str, key: bytes, port: int) -> list[str]:
    """mlx.launch's command line for the ranks (`port`: the first of the ring's ports)."""
    where = ["--hostfile", ranks.hostfile] if ranks.hostfile else ["-n", str(ranks.count)]
    return [
        sys.executable, "-c", LAUNCHER,
        "--backend", ranks.backend, *where, "--starting-port", str(port),
        "--env", f"{ADDRESS}={address}", "--env", f"{KEY}={key.hex()}",
        "--", sys.executable, "-m", "omni.runtime.chat.rank",
    ]  # fmt: skip


def host_file(path: str) -> tuple[tuple[str, ...], str | None]:
    """An MLX host file read as mlx.launch reads it (a list of hosts, or the object
    mlx.distributed_config writes): its hosts' `ssh` names, rank by rank, and the backend it
    names (None: none). ValueError, in the launcher's words, if it cannot be read."""
    from mlx._distributed_utils.common import Hostfile

    read = Hostfile.from_file(path)  # type: ignore[no-untyped-call]
    if not read.hosts:
        raise ValueError(f"{path} names no host")
    return tuple(h.ssh_hostname for h in read.hosts), read.backend or None


def local_backend() -> str:
    """The backend mlx.launch picks where nothing names one: NCCL where CUDA is, else the
    ring."""
    import mlx.core as mx

    return "nccl" if mx.cuda.is_available() else "ring"


def free_ports(n: int) -> int:
    """The first of `n` consecutive ports free on this machine (the ring's, a rank each)."""
    for _ in range(100):
        first = random.randrange(20_000, 60_000 - n)
        try:
            for port in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("", port))
        except OSError:
            continue
        return first
    raise OSError(f"no {n} consecutive free ports")


def launch(
    source: ModelSource, settings: EngineSettings, ranks: Ranks
) -> tuple[Launched, Connection, Path | None]:
    """Start `ranks` (settings.ranks) and wait for rank 0 to call back; send it the model's
    order. The launcher's process, and the server's end of rank 0's connection."""
    key = os.urandom(32)
    listener = Listener(("127.0.0.1", 0), authkey=key)
    host, port = listener.address
    cmd = command(ranks, f"{host}:{port}", key, free_ports(ranks.count))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_root(), os.environ.get("PYTHONPATH", "")])}
    # The ranks on this machine preload the BLAS an engine process does (the same kernels as
    # the model served whole).
    with gemv.engine_libraries(settings.blas) as forwarder:
        popen = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True,  # its group: stopping it stops every rank it started
        )  # fmt: skip
    launched = Launched(popen, list(ranks.hosts) or None)
    conn = _accept(listener, launched)
    conn.send((source.path, settings, source.adapter, source.draft))
    return launched, conn, forwarder


def _accept(listener: Listener, launched: Launched) -> Connection:
    """Rank 0's connection, or OSError with what the ranks said if they end before it."""
    done: list[Connection] = []
    taker = threading.Thread(target=lambda: done.append(listener.accept()), daemon=True)
    taker.start()
    waited = 0.0
    while not done and launched.is_alive() and waited < ACCEPT_S:
        taker.join(0.2)
        waited += 0.2
    listener.close()
    if not done:
        launched.terminate()
        raise OSError(f"the ranks did not start: {launched.why()}")
    return done[0]


def named(lines: list[str], hosts: list[str] | None) -> str:
    """The launcher's word of each rank that exited, with its host ("this machine" for local
    ranks): "rank 1 (on mac2) exited with code 1"."""
    said = []
    for line in lines:
        if (found := EXITED.search(line)) is not None:
            rank, code = int(found[1]), found[2]
            host = "this machine" if hosts is None else hosts[rank % len(hosts)]
            said.append(f"rank {rank} (on {host}) exited with code {code}")
    return "; ".join(said)


def _root() -> str:
    """The folder this package is imported from (the ranks import the same Omni)."""
    return str(Path(__file__).resolve().parents[3])
