"""The MLX embedder: an embedding model in a process of its own (omni.runtime.embed_worker),
its tokenizer here. The server process never imports MLX for it: the model's process has the
accelerator, and the server's Python work (HTTP, SQLite, JSON) never holds the interpreter
lock a pass is waiting for."""

from __future__ import annotations

import array
import asyncio
import itertools
import json
import logging
import multiprocessing
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError, OmniError
from omni.jobs import EmbeddingCapabilities
from omni.runtime import blas, embed_wire, embed_worker, pooling

log = logging.getLogger(__name__)

# Inputs embedded in one pass of the model, at most.
MAX_BATCH = 64

Tokenize = Callable[[list[str]], list[list[int]]]


def load_tokenizer(folder: Path) -> tuple[Tokenize, int]:
    """The folder's tokenizer (special tokens added, nothing truncated or padded) and its
    vocabulary's size. `tokenizers` reads tokenizer.json; a folder without one goes through
    transformers (neither imports MLX)."""
    if (folder / "tokenizer.json").exists():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()

        def fast(texts: list[str]) -> list[list[int]]:
            return [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]

        return fast, int(tok.get_vocab_size(with_added_tokens=True))
    from transformers import AutoTokenizer

    slow = AutoTokenizer.from_pretrained(str(folder))

    def other(texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in slow(texts, add_special_tokens=True)["input_ids"]]

    return other, len(slow)


class MLXEmbedder:
    """Implements omni.jobs.Embedder: start() loads the model, embed() is answered from the
    model's process by a reader thread, so the event loop never waits on the pipe."""

    def __init__(self, path: str, model_id: str, max_batch: int = MAX_BATCH):
        self.path = path
        self.model_id = model_id
        self.max_batch = max_batch
        self._caps = EmbeddingCapabilities(0, 0)
        self._vocab = 0
        self._tokenize: Tokenize | None = None
        self._process: Any = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._gone: str | None = None  # why the model's process is no longer there
        self._reader = threading.Thread(target=self._read, name="omni-embed-reader", daemon=True)

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        folder = Path(self.path)
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"cannot load embedding model {self.path}: no config.json")
        try:
            self._tokenize, self._vocab = load_tokenizer(folder)
        except Exception as exc:  # noqa: BLE001 - any reason the tokenizer cannot load
            raise ModelLoadError(f"cannot load the tokenizer of {self.path}: {exc}") from None
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads
        conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=embed_worker.main,
            args=(child, self.path, self.max_batch),
            name="omni-embedder",
        )
        # The engine's BLAS rule (omni.runtime.blas): on MLX's CPU build an optimized BLAS,
        # preloaded into the model's process alone; all-MiniLM-L6-v2 embeds ~20x faster.
        with blas.preloaded(blas.preload(blas.AUTO)):
            self._process.start()
        child.close()
        try:
            message = conn.recv()
        except EOFError:
            self._process.join()
            message = embed_wire.LoadFailed(f"its process exited ({self._process.exitcode})")
        if not isinstance(message, embed_wire.Loaded):
            conn.close()
            self._process.join(timeout=5)
            self._process = None
            raise ModelLoadError(f"cannot load embedding model {self.path}: {message.message}")
        config = json.loads((folder / "config.json").read_text())
        rows = config.get("vocab_size")  # the model's embedding table
        vocab = min(self._vocab, rows) if isinstance(rows, int) else self._vocab
        length = pooling.context_length(folder)
        self._caps = EmbeddingCapabilities(message.dimensions, length, vocab)
        self._conn = conn
        self._reader.start()

    @property
    def capabilities(self) -> EmbeddingCapabilities:
        return self._caps

    @property
    def running(self) -> int:
        return len(self._pending)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        assert self._tokenize is not None, "start() first"
        return self._tokenize(texts)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        if self._gone is not None:
            raise OmniError(self._gone)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        job_id = next(self._ids)
        self._pending[job_id] = (loop, future)
        try:
            # A big request is megabytes of pickle: sent from a thread, the loop goes on.
            await asyncio.to_thread(self._send, embed_wire.Embed(job_id, inputs))
            return await future  # type: ignore[no-any-return]
        finally:
            self._pending.pop(job_id, None)

    def close(self) -> None:
        """Stop the model's process (requests in progress fail)."""
        if self._process is None:
            return
        self._gone = self._gone or "the server is shutting down"
        try:
            self._send(embed_wire.Close())
        except OmniError:
            pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        if self._reader.is_alive():
            self._reader.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._process = None

    def _send(self, message: embed_wire.Request) -> None:
        if self._conn is None:
            raise OmniError(self._gone or "the embedding model is not loaded")
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # the process is gone; the reader reports it
            raise OmniError(self._gone or "the embedding model's process is gone") from None

    def _read(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                break
            entry = self._pending.get(reply.id)
            if entry is None:
                continue
            loop, future = entry
            match reply:
                case embed_wire.Vectors(_, data, count):
                    value: Any = _rows(data, count)
                case embed_wire.Failed(_, message):
                    value = OmniError(f"the embedding model failed: {message}")
            _settle(loop, future, value)
        exit_code = self._process.exitcode if self._process is not None else None
        if self._gone is None:
            self._gone = f"the embedding model's process exited unexpectedly ({exit_code})"
            log.error("%s", self._gone)
        for loop, future in list(self._pending.values()):
            _settle(loop, future, OmniError(self._gone))


def _rows(data: bytes, count: int) -> list[list[float]]:
    """float32 little-endian bytes, as `count` rows of floats (done in the reader thread)."""
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    width = len(values) // count if count else 0
    flat = values.tolist()
    return [flat[i * width : (i + 1) * width] for i in range(count)]


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any) -> None:
    def put() -> None:
        if future.done():
            return
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)

    try:
        loop.call_soon_threadsafe(put)
    except RuntimeError:  # that event loop is closed: nobody is left to read it
        pass
