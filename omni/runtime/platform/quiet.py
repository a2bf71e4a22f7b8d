"""Start-up chatter from the libraries under mlx-lm that does not concern Omni."""

from __future__ import annotations

import os


def no_torch_advice() -> None:
    """transformers (for tokenizers) advises at import that PyTorch was not found, which Omni
    never needs. mlx-lm sets this switch when imported, but llguidance imports transformers
    first: set it before either (the engine process inherits it); a value already set wins."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
