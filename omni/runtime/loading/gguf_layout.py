"""Pre-check a GGUF file's header and tensor table before MLX reads it."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from omni.errors import ModelLoadError

# Tensor types MLX imports: ggml type id -> (name, elements per block, bytes per block).
_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    8: ("Q8_0", 32, 34),
}
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _U32 = 8, 9, 4


class _Cursor:
    """Bounds-checked reads over the GGUF header; a short read means a corrupt file."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> int:
        if n > len(self.buf) - self.pos:
            raise ValueError("it ends inside its header")
        self.pos += n
        return self.pos - n

    def u32(self) -> int:
        return int(struct.unpack_from("<I", self.buf, self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack_from("<Q", self.buf, self.take(8))[0])

    def text(self) -> str:
        size = self.u64()
        start = self.take(size)
        return self.buf[start : start + size].decode("utf-8", "replace")

    def skip_value(self, kind: int, nested: bool = False) -> None:
        if kind == _STRING:
            self.take(self.u64())
        elif kind in _SCALAR_BYTES:
            self.take(_SCALAR_BYTES[kind])
        elif kind == _ARRAY and not nested:
            inner, count = self.u32(), self.u64()
            if inner in _SCALAR_BYTES:
                self.take(count * _SCALAR_BYTES[inner])
            else:
                for _ in range(count):  # each string takes >= 8 bytes, so this ends
                    self.skip_value(inner, nested=True)
        else:
            raise ValueError(f"it has an unknown metadata value type {kind}")


def check_layout(path: Path) -> None:
    """Walk the header and tensor table so MLX never parses a malformed file."""
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    if path.stat().st_size < 24:
        raise ModelLoadError(f"corrupt GGUF file {path.name}: it is too short")
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ModelLoadError(f"{path.name} is not a GGUF file")
        try:
            _walk(_Cursor(buf), path.name)
        except (ValueError, OverflowError) as exc:
            raise ModelLoadError(f"corrupt GGUF file {path.name}: {exc}") from exc


def _walk(cur: _Cursor, name: str) -> None:
    cur.take(4)
    if (version := cur.u32()) not in (2, 3):
        raise ModelLoadError(f"{name} is GGUF version {version}; Omni reads versions 2 and 3")
    n_tensors, n_kv, alignment = cur.u64(), cur.u64(), 32
    for _ in range(n_kv):
        key, kind = cur.text(), cur.u32()
        if key == "general.alignment" and kind == _U32:
            alignment = cur.u32() or 32
        else:
            cur.skip_value(kind)
    ends: list[tuple[str, int]] = []
    for _ in range(n_tensors):
        tensor, n_dims = cur.text(), cur.u32()
        if n_dims > 4:
            raise ValueError(f"tensor {tensor!r} claims {n_dims} dimensions")
        dims = [cur.u64() for _ in range(n_dims)]
        kind, offset = cur.u32(), cur.u64()
        if kind not in _TYPES:
            supported = ", ".join(t[0] for t in _TYPES.values())
            raise ModelLoadError(f"GGUF tensor {tensor!r} has type {kind}; supported: {supported}")
        _, block, nbytes = _TYPES[kind]
        if n_dims == 0 or dims[0] % block:
            raise ValueError(f"tensor {tensor!r} has a bad shape {dims}")
        ends.append((tensor, offset + _prod(dims) // block * nbytes))
    data_start = -(-cur.pos // alignment) * alignment
    for tensor, end in ends:
        if data_start + end > len(cur.buf):
            raise ValueError(f"tensor {tensor!r} extends past the end (truncated download?)")


def _prod(dims: list[int]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total
