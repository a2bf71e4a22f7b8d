"""Whose an object is: every stored request records the owner (an API key's name or hash,
never the key) that made it, and no read, list, cancel, delete or cache crosses owners."""

from __future__ import annotations

from typing import Any


def visible(request: dict[str, Any], owner: str | None) -> bool:
    """Whether `owner` may see the object `request` created. None is a server without keys,
    whose one client sees all."""
    return owner is None or request.get("owner") == owner


def cache_namespace(owner: str | None, prompt_cache_key: str | None) -> str:
    """The prefix-cache namespace: a prompt's KV cache is reused only by the same owner."""
    key = prompt_cache_key or ""
    return key if owner is None else f"{owner}\x1f{key}"
