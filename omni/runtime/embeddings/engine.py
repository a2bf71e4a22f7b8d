"""The MLX embedder: an embedding model in a process of its own (omni.runtime.embeddings.worker),
its tokenizer here. The server process never imports MLX for it: the model's process has the
accelerator, and the server's Python work (HTTP, SQLite, JSON) never holds the interpreter
lock a pass is waiting for."""

from __future__ import annotations

import array
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni.errors import ModelLoadError
from omni.ports.embeddings import EmbeddingCapabilities
from omni.runtime.embeddings import pooling, wire, worker
from omni.runtime.model_process import ModelProcess

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


class MLXEmbedder(ModelProcess):
    """Implements omni.ports.embeddings.Embedder: start() loads the model, embed() is answered
    from the model's process by a reader thread, so the event loop never waits on the pipe."""

    def __init__(self, path: str, model_id: str, max_batch: int = MAX_BATCH):
        super().__init__(path, "embedding model", "omni-embedder", wire.Close())
        self.model_id = model_id
        self.max_batch = max_batch
        self._caps = EmbeddingCapabilities(0, 0)
        self._vocab = 0
        self._tokenize: Tokenize | None = None

    def start(self) -> None:
        """Start the model's process and load the model; raise ModelLoadError if it cannot."""
        folder = Path(self.path)
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"cannot load embedding model {self.path}: no config.json")
        try:
            self._tokenize, self._vocab = load_tokenizer(folder)
        except Exception as exc:  # noqa: BLE001 - any reason the tokenizer cannot load
            raise ModelLoadError(f"cannot load the tokenizer of {self.path}: {exc}") from None
        # On MLX's CPU build the preloaded BLAS embeds all-MiniLM-L6-v2 ~20x faster.
        args = (self.path, self.max_batch)
        message = self.launch(worker.main, args, wire.Loaded)
        config = json.loads((folder / "config.json").read_text())
        rows = config.get("vocab_size")  # the model's embedding table
        vocab = min(self._vocab, rows) if isinstance(rows, int) else self._vocab
        length = pooling.context_length(folder)
        self._caps = EmbeddingCapabilities(message.dimensions, length, vocab)

    @property
    def capabilities(self) -> EmbeddingCapabilities:
        return self._caps

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        assert self._tokenize is not None, "start() first"
        return self._tokenize(texts)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        vectors: list[list[float]] = await self.ask(lambda i: wire.Embed(i, inputs))
        return vectors

    def answer(self, reply: Any) -> Any:
        match reply:
            case wire.Vectors(_, data, count):
                return _rows(data, count)
            case wire.Failed(_, message):
                return self.failed(message)


def _rows(data: bytes, count: int) -> list[list[float]]:
    """float32 little-endian bytes, as `count` rows of floats (done in the reader thread)."""
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    width = len(values) // count if count else 0
    flat = values.tolist()
    return [flat[i * width : (i + 1) * width] for i in range(count)]
