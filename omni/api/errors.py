"""One handler renders every error as OpenAI's error body."""

from __future__ import annotations

import logging

from quart import Quart, Response, has_request_context, jsonify, request
from werkzeug.exceptions import HTTPException

from omni.errors import SERVER_ERROR, OmniError

log = logging.getLogger(__name__)

# Anthropic's API (omni.api.messages) answers errors in its own shape, on every path of it.
ANTHROPIC_PATHS = ("/v1/messages", "/messages")
# An HTTP status → Anthropic's error type (what is not here: api_error, or a 4xx's
# invalid_request_error).
ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_body(exc: OmniError) -> dict[str, object]:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`."""
    fallback = "api_error" if exc.status >= 500 else "invalid_request_error"
    message = exc.message if exc.public else SERVER_ERROR
    kind = ANTHROPIC_TYPES.get(exc.status, fallback)
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic() -> bool:
    return has_request_context() and request.path.startswith(ANTHROPIC_PATHS)


def error_response(exc: OmniError) -> Response:
    response = jsonify(anthropic_body(exc) if _anthropic() else exc.body())
    response.status_code = exc.status
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:  # nothing was started: a retry is safe
        response.headers["retry-after"] = str(retry_after)
    elif exc.status >= 500:
        # The SDK retries 5xx twice; a failed generation must not run three times.
        response.headers["x-should-retry"] = "false"
    return response


def install(app: Quart) -> None:
    @app.errorhandler(OmniError)
    async def _omni(exc: OmniError) -> Response:
        if not exc.public:  # the client reads SERVER_ERROR; the operator, what happened
            log.error("%s: %s", type(exc).__name__, exc.message)
        return error_response(exc)

    @app.errorhandler(HTTPException)
    async def _http(exc: HTTPException) -> Response:
        err = OmniError(exc.description or exc.name)
        err.status = exc.code or 500
        err.type = "invalid_request_error" if err.status < 500 else "server_error"
        err.code = None if err.status < 500 else "server_error"
        if err.status == 413:  # a body without a length, cut off where it passed the limit
            err.code = "request_too_large"
        return error_response(err)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")  # its text is for the log, never the client
        return error_response(OmniError(SERVER_ERROR))
