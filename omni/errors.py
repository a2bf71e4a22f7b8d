"""One error hierarchy, rendered by one handler as OpenAI's error body."""

from __future__ import annotations


class OmniError(Exception):
    """An error a client may see: carries its HTTP status and OpenAI error fields."""

    status = 500
    type = "server_error"
    code: str | None = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(OmniError):
    status = 400
    type = "invalid_request_error"
    code: str | None = None


class NotFound(OmniError):
    status = 404
    type = "invalid_request_error"
    code: str | None = None


class ModelNotFound(NotFound):
    code = "model_not_found"


class ModelLoadError(OmniError):
    """A model could not be found, fetched, verified or converted (a start-up error)."""

    code = "model_load_error"


class StoreError(OmniError):
    """The event store failed (driver errors are translated into this)."""


class SeqConflict(StoreError):
    """An append's expected seq did not match the stream's next seq."""

    status = 409
    code = "conflict"


class Overloaded(OmniError):
    """Too many requests are waiting for the engine: come back later (429 + retry-after)."""

    status = 429
    type = "rate_limit_error"
    code: str | None = "rate_limit_exceeded"
    retry_after = 1


class ShuttingDown(OmniError):
    """The server is stopping: it takes no new work (503; another server may, or this one
    once restarted)."""

    status = 503
    code: str | None = "server_shutting_down"
    retry_after = 1


class Unauthorized(OmniError):
    """No API key, or one this server does not know (401, as OpenAI answers it)."""

    status = 401
    type = "invalid_request_error"
    code: str | None = "invalid_api_key"


class Forbidden(OmniError):
    """A request from a host name or a web origin this server does not answer."""

    status = 403
    type = "invalid_request_error"
    code: str | None = "forbidden"


class PayloadTooLarge(OmniError):
    status = 413
    type = "invalid_request_error"
    code: str | None = "request_too_large"


class UnsupportedMediaType(OmniError):
    status = 415
    type = "invalid_request_error"
    code: str | None = "unsupported_media_type"


class DatabaseInUse(StoreError):
    """Another live `omni serve` holds the database's lock (omni/lock.py)."""
