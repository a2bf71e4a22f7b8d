"""What the engine process reports about itself."""

from __future__ import annotations

from dataclasses import dataclass

from omni.runtime.platform.blas import describe


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the engine process found itself running the model with, once it was loaded."""

    blas: str | None  # the BLAS library MLX's products run on (None: on a GPU, or none)
    weights: str  # "float32", "4/8-bit quantized", ...
    weights_setting: str  # what --weights asked for (auto, stored, float32)
    gemv: bool = False  # one-row products go to the BLAS's sgemv (omni.runtime.platform.gemv)
    memory_bytes: int = 0  # what the weights (a draft model's too) take in memory, as run

    def __str__(self) -> str:
        blas = "" if self.blas is None else f"BLAS {describe(self.blas)}, "
        if self.gemv:
            blas = blas.replace("), ", ") with one-row products as sgemv, ")
        return f"{blas}weights {self.weights} (--weights {self.weights_setting})"
