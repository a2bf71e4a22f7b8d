"""`metadata` as OpenAI bounds it: at most 16 keys, keys of at most 64 characters and values
of at most 512 (a response's, a conversation's)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _bounded(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("at most 16 keys")
    for key, val in value.items():
        if len(key) > 64 or len(val) > 512:
            raise ValueError("keys are at most 64 characters, values at most 512")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(_bounded)]
