"""One handler renders every error as OpenAI's error body."""

from __future__ import annotations

import logging

from quart import Quart, Response, jsonify
from werkzeug.exceptions import HTTPException

from omni.errors import SERVER_ERROR, OmniError

log = logging.getLogger(__name__)


def error_response(exc: OmniError) -> Response:
    response = jsonify(exc.body())
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
