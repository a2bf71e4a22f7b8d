"""One rank of a sharded model, as MLX's launcher starts it (`mlx.launch ... python -m
omni.runtime.chat.rank`; omni.runtime.chat.ranks starts that). Rank 0 connects to the server
(the address and key in its environment) and takes the model's order from it; every rank loads
its shard of the model (mlx-lm's sharded_load: tensor or pipeline parallel) and runs the
engine's scheduler in lockstep with the others (omni.runtime.chat.lockstep)."""

from __future__ import annotations

import logging
import os
import sys
from multiprocessing.connection import Client, Connection
from typing import Any

import mlx.core as mx

from omni.runtime.chat.lockstep import Lockstep, share
from omni.runtime.chat.ranks import ADDRESS, KEY
from omni.settings import Ranks

log = logging.getLogger(__name__)


def sharded(path: str, group: Any, ranks: Ranks | None) -> tuple[Any, Any]:
    """This rank's shard of the model at `path` and its tokenizer (tensor or pipeline
    parallel, as `ranks` says and mlx-lm's model supports)."""
    from mlx_lm.utils import sharded_load

    if ranks is not None and ranks.sharding == "pipeline":
        model, tokenizer = sharded_load(path, pipeline_group=group)[:2]
    else:
        model, tokenizer = sharded_load(path, tensor_group=group)[:2]
    return model, tokenizer


def _connect() -> Connection | None:
    host, _, port = os.environ[ADDRESS].rpartition(":")
    try:
        return Client((host, int(port)), authkey=bytes.fromhex(os.environ[KEY]))
    except OSError as exc:
        print(f"omni rank 0: cannot reach the server at {host}:{port}: {exc}", file=sys.stderr)
        return None


def main() -> None:
    from omni.runtime.chat import worker

    group = mx.distributed.init(strict=True)
    lead = group.rank() == 0
    conn = _connect() if lead else None
    order = conn.recv() if conn is not None else None
    # Every rank learns the order (or that there is none) from rank 0, and the same seed.
    shared = share(group, None if order is None else (*order, int.from_bytes(os.urandom(4))))
    if shared is None:
        raise SystemExit(1)
    path, settings, adapter, draft, seed = shared
    mx.random.seed(seed)
    worker.main(Lockstep(group, conn), path, settings, adapter, draft, group=group)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
