"""The file of a KV cache as mlx-lm's save_prompt_cache writes it (load_prompt_cache reads it),
written from host memory with no MLX call: the disk tier's writer thread must not touch MLX,
whose streams are each thread's own and whose work there held the model's thread (on an H100,
a decode with writes going on ran at 0.07x).

The layout is safetensors: a little-endian u64 header size, the JSON header (each tensor's
dtype, shape and byte range; `__metadata__`, all strings), then the tensors' bytes. mlx-lm's
names: each layer's state flattened (`"0.0"`, `"0.1"`, …); scalars in a state stored as arrays
and named in the metadata; the metadata is `[metadata, class names, scalars]` flattened."""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

import numpy as np
from mlx.utils import tree_flatten as _flatten

from omni.runtime.chat.kv_copies import Bits, HostCache

# mlx leaves its return type loose: its (name, leaf) pairs.
tree_flatten: Any = _flatten

DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
          "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64",
          "float16": "F16", "float32": "F32", "float64": "F64"}  # fmt: skip


def write_cache(f: BinaryIO, host: HostCache, metadata: dict[str, str]) -> None:
    """Write `host` to `f` with `metadata`, as save_prompt_cache would write the cache."""
    scalars: list[Any] = [""]  # mlx-lm's: never empty
    tensors: dict[str, tuple[str, np.ndarray[Any, Any]]] = {}
    for name, value in tree_flatten(list(host.states)):
        tensors[name] = _tensor(name, value, scalars)
    classes = [c.__name__ for c in host.classes]
    header: dict[str, Any] = {"__metadata__": dict(tree_flatten([metadata, classes, scalars]))}
    offset = 0
    for name, (dtype, array) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}  # fmt: skip
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the tensors start 8-byte aligned
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for _, array in tensors.values():
        f.write(np.ascontiguousarray(array).data)


def _tensor(name: str, value: Any, scalars: list[Any]) -> tuple[str, np.ndarray[Any, Any]]:
    """A state's leaf as a tensor; a scalar's kind is added to `scalars`, as mlx-lm does."""
    if isinstance(value, Bits):
        return "BF16", value.array
    if isinstance(value, np.ndarray):
        return DTYPES[value.dtype.name], value
    if isinstance(value, bool):
        scalars.append((name, "scalar"))
        return "BOOL", np.array(value)
    if isinstance(value, int):
        scalars.append((name, "scalar"))
        return "I32", np.array(value, dtype=np.int32)
    if isinstance(value, float):
        scalars.append((name, "scalar"))
        return "F32", np.array(value, dtype=np.float32)
    if isinstance(value, str):
        scalars.append((name, "string"))
        return "I32", np.array([ord(c) for c in value], dtype=np.int32)
    if value is None:
        scalars.append((name, "none"))
        return "F32", np.zeros(0, dtype=np.float32)
    raise ValueError(f"a cache state holds what cannot be written: {type(value).__name__}")
