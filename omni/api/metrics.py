"""GET /metrics: Prometheus' text format. Open like /health (as vLLM's is): it carries counts
and timings, never a prompt, an id or a key."""

from __future__ import annotations

from quart import Blueprint, Response

from omni.api.current import current_server
from omni.metrics import CONTENT_TYPE_LATEST

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
async def metrics() -> Response:
    return Response(current_server().metrics.render(), content_type=CONTENT_TYPE_LATEST)
