"""Commands and queries of the APIs over the event log (no HTTP here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni.service.responses import ResponsesService

__all__ = ["ResponsesService"]


def __getattr__(name: str) -> Any:
    # On first use: `omni db` reads omni.service.retention without loading the tokenizers.
    if name == "ResponsesService":
        from omni.service.responses import ResponsesService

        return ResponsesService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
