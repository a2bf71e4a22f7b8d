"""Commands and queries of the APIs over the event log (no HTTP here)."""

from omni.service.responses import ResponsesService

__all__ = ["ResponsesService"]
