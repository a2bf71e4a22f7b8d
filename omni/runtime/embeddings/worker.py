"""An embedding model's process: loads the model with mlx-embeddings, then embeds what the
server sends until it closes. Requests that arrive together are embedded together: their
inputs, sorted by length, go through the model in padded passes of up to `max_batch`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.runtime.embeddings.pooling import pooling_modes
from omni.runtime.embeddings.wire import Close, Embed, Failed, Loaded, Vectors
from omni.runtime.model_worker import serve_model, why

# Padded tokens of one pass, at most (64 inputs of 256 tokens): a pass of long inputs is
# split smaller, so that its attention's memory stays bounded.
MAX_PASS_TOKENS = 64 * 256


def passes(
    lengths: Sequence[int], max_batch: int, max_tokens: int = MAX_PASS_TOKENS
) -> list[list[int]]:
    """The inputs' indices in passes: longest first, each pass of similar lengths (little
    padding), of at most `max_batch` inputs and `max_tokens` padded tokens (one at least)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        current = out[-1] if out else None
        # Sorted longest first: the pass's first input sets its width.
        if (
            current
            and len(current) < max_batch
            and lengths[current[0]] * (len(current) + 1) <= max_tokens
        ):
            current.append(i)
        else:
            out.append([i])
    return out


class Runner:
    """The loaded model and how to pool its output: one pass at a time."""

    def __init__(self, path: str):
        from mlx_embeddings.utils import load_model

        folder = Path(path)
        # The model alone: the tokenizer lives in the server process (embeddings.engine).
        self.model = load_model(folder, path_to_repo=path)
        self.modes = pooling_modes(folder)
        config = json.loads((folder / "config.json").read_text())
        pad = config.get("pad_token_id")
        self.pad = pad if isinstance(pad, int) else 0

    def embed(self, rows: list[list[int]]) -> Any:
        """Unit vectors (an mx.array of float32, one row an input) of one padded pass."""
        import mlx.core as mx
        import numpy as np

        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad, dtype=np.int32)
        mask = np.zeros((len(rows), width), dtype=np.float32)
        for n, row in enumerate(rows):
            ids[n, : len(row)] = row
            mask[n, : len(row)] = 1.0
        out = self.model(mx.array(ids), attention_mask=mx.array(mask))
        hidden = getattr(out, "last_hidden_state", None)
        if self.modes is not None and hidden is not None and hidden.ndim == 3:
            pooled = pool(hidden.astype(mx.float32), mx.array(mask), self.modes)
        else:
            pooled = out.text_embeds.astype(mx.float32)
        norm = mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
        vectors = pooled / norm
        mx.eval(vectors)
        return vectors


def pool(hidden: Any, mask: Any, modes: tuple[str, ...]) -> Any:
    """sentence-transformers' pooling of (batch, tokens, width) hidden states under a 0/1
    mask (right padded), its modes concatenated in its order."""
    import mlx.core as mx

    m = mask[:, :, None]
    count = mx.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
    parts = []
    for mode in modes:
        if mode == "cls":
            parts.append(hidden[:, 0])
        elif mode == "max":
            parts.append(mx.where(m > 0, hidden, -1e9).max(axis=1))
        elif mode == "mean":
            parts.append((hidden * m).sum(axis=1) / count)
        elif mode == "mean_sqrt_len":
            parts.append((hidden * m).sum(axis=1) / mx.sqrt(count))
        elif mode == "lasttoken":
            last = (mask.sum(axis=1) - 1).astype(mx.int32)
            parts.append(hidden[mx.arange(hidden.shape[0]), last])
    return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-1)


def main(conn: Connection, path: str, max_batch: int) -> None:
    def load() -> tuple[Runner, Loaded]:
        runner = Runner(path)
        dimensions = int(runner.embed([[runner.pad, runner.pad]]).shape[-1])  # and warm up
        return runner, Loaded(dimensions)

    serve_model(conn, "embeddings", load, lambda runner: serve(conn, runner, max_batch))


def serve(conn: Connection, runner: Runner, max_batch: int) -> None:
    while True:
        requests: list[Embed] = []
        message = conn.recv()
        while True:  # what has arrived meanwhile is embedded with it
            match message:
                case Close():
                    return
                case Embed():
                    requests.append(message)
            if not conn.poll(0):
                break
            message = conn.recv()
        embed_together(conn, runner, requests, max_batch)


def embed_together(conn: Connection, runner: Runner, requests: list[Embed], max_batch: int) -> None:
    """Every input of `requests` in shared passes; each request answered once its last
    input is embedded (a short request does not wait for a long one's last pass)."""
    import numpy as np

    owners = [(r, i) for r, request in enumerate(requests) for i in range(len(request.inputs))]
    rows = [requests[r].inputs[i] for r, i in owners]
    out = [np.zeros((len(r.inputs), 0), dtype=np.float32) for r in requests]
    left = [len(r.inputs) for r in requests]
    for request in requests:
        if not request.inputs:
            conn.send(Vectors(request.id, b"", 0))
    try:
        for group in passes([len(row) for row in rows], max_batch):
            vectors = np.array(runner.embed([rows[k] for k in group]), copy=False)
            for k, vector in zip(group, vectors, strict=True):
                r, i = owners[k]
                if out[r].shape[1] == 0:
                    out[r] = np.zeros((len(requests[r].inputs), vector.shape[0]), np.float32)
                out[r][i] = vector
                left[r] -= 1
                if left[r] == 0:
                    request = requests[r]
                    data = out[r].astype("<f4").tobytes()
                    conn.send(Vectors(request.id, data, len(request.inputs)))
    except Exception as exc:  # noqa: BLE001 - reported to the server as a value
        for r, request in enumerate(requests):
            if left[r]:
                conn.send(Failed(request.id, why(exc)))
