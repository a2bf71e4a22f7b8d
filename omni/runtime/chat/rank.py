"""One rank of a sharded model, as MLX's launcher starts it (`mlx.launch ... python -m
omni.runtime.chat.rank`; omni.runtime.chat.ranks starts that). Rank 0 connects to the server
(the address and key in its environment) and takes the model's order from it; every rank loads
its shard of the model (mlx-lm's sharded_load: tensor or pipeline parallel) and runs the
engine's scheduler in lockstep with the others (omni.runtime.chat.lockstep)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from multiprocessing.connection import Client, Connection
from pathlib import Path
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

    pipeline = ranks is not None and ranks.sharding == "pipeline"
    if not pipeline:
        heads_divide(Path(path), group.size())
    try:
        if pipeline:
            model, tokenizer = sharded_load(path, pipeline_group=group)[:2]
        else:
            model, tokenizer = sharded_load(path, tensor_group=group)[:2]
    except ValueError as exc:  # mlx-lm's model splits only the other way, or not at all
        if "group was provided" not in str(exc):  # not at all
            raise
        other = "tensor" if pipeline else "pipeline"
        raise ValueError(f"{exc} (--sharding {other} may split this model)") from None
    return model, tokenizer


HEADS = {
    "num_attention_heads": "attention heads",
    "num_key_value_heads": "heads of keys and values",
}


def heads_divide(folder: Path, count: int) -> None:
    """ValueError, saying which rank counts would do, unless the model's attention heads (and
    those of its keys and values) divide among `count` ranks: tensor parallel gives each rank
    a share of each layer's, and mlx-lm's models divide them with no remainder check (a model
    of 9 heads over 2 ranks loads, then fails every request with a shape error in its
    attention, the ranks reloaded each time)."""
    if not (folder / "config.json").is_file():  # a repo id: sharded_load fetches it
        return
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    heads = {what: n for key, what in HEADS.items() if isinstance(n := text.get(key), int) and n}
    if all(n % count == 0 for n in heads.values()):
        return
    fits = [k for k in range(2, max(heads.values()) + 1) if all(n % k == 0 for n in heads.values())]
    said = " and ".join(f"{n} {what}" for what, n in heads.items())
    raise ValueError(
        f"tensor parallel over {count} ranks gives each a share of every layer's heads, and "
        f"this model's {said} do not divide by {count}: "
        + (f"--ranks {' or '.join(map(str, fits))} would split them, " if fits else "")
        + "or --sharding pipeline where mlx-lm's model pipelines"
    )


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
    # Every rank learns the order (or that there is none) from rank 0, the same seed, and
    # rank 0's clock.
    seed = int.from_bytes(os.urandom(4))
    shared = share(group, None if order is None else (*order, seed, time.perf_counter()))
    if shared is None:
        raise SystemExit(1)
    path, settings, adapter, draft, seed, at = shared
    mx.random.seed(seed)
    steps = Lockstep(group, conn, at)
    worker.main(steps, path, settings, adapter, draft, group=group)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
