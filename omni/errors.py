"""One error hierarchy, rendered by one handler as OpenAI's error body."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: What a client reads of an error whose own text is not for it (OpenAI's words for a 500).
SERVER_ERROR = "The server had an error while processing your request."


class OmniError(Exception):
    """An error a client may see: carries its HTTP status and OpenAI error fields."""

    status = 500
    type = "server_error"
    code: str | None = "server_error"
    public = True  # False: the message is for the server's log only (a driver's text, say)
    exit_status = 1  # what `omni` exits with when this ends a command

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message if self.public else SERVER_ERROR,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class Refused(OmniError):
    """A request refused for what it is or asks (OpenAI's invalid_request_error, a 4xx)."""

    status = 400
    type = "invalid_request_error"
    code: str | None = None


class InvalidRequest(Refused):
    pass


class NotFound(Refused):
    status = 404


class ModelNotFound(NotFound):
    code = "model_not_found"


class ModelLoadError(OmniError):
    """A model could not be found, fetched, verified or converted (a start-up error). Its
    message says why, for the operator; a request reads `of(model_id)`'s."""

    code = "model_load_error"

    @classmethod
    def of(cls, model_id: str) -> ModelLoadError:
        """What a request reads when its model could not be loaded (the log says why)."""
        return cls(f"The model '{model_id}' could not be loaded; the server's log says why.")


class StoreError(OmniError):
    """The event store failed (driver errors are translated into this). Its message, which
    may quote the driver, goes to the log; a client reads only SERVER_ERROR."""

    public = False


class UnusableDatabase(StoreError):
    """A database file this Omni must not write: not SQLite, another program's database, a
    newer schema, or damaged. Refused before a byte is written."""

    exit_status = 2


class StoreUnavailable(StoreError):
    """The log cannot be written any more (its file was deleted or replaced under the
    server): every request that needs it is refused until a restart."""

    status = 503
    code = "database_unavailable"
    public = True  # says what happened and what to do, and quotes no driver


class LeaseLost(StoreError):
    """An append to a stream that another server has leased (it took the work over, this
    one's lease having expired): refused, so that each stream has one writer."""


class SeqConflict(StoreError):
    """An append's expected seq did not match the stream's next seq. Writers that decide on
    what they read hold the stream's lock (omni/service/serial.py), so one reaching a
    client is a server error like any other."""


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


class Unauthorized(Refused):
    """No API key, or one this server does not know (401, as OpenAI answers it)."""

    status, code = 401, "invalid_api_key"


class Forbidden(Refused):
    """A request from a host name or a web origin this server does not answer."""

    status, code = 403, "forbidden"


class PayloadTooLarge(Refused):
    status, code = 413, "request_too_large"


class UnsupportedMediaType(Refused):
    status, code = 415, "unsupported_media_type"


class NotInstalled(OmniError):
    """A feature whose optional extra is not installed here: the message says how to."""

    status = 501
    type = "server_error"
    code: str | None = "feature_not_installed"


class DatabaseInUse(StoreError):
    """Another live `omni serve` holds the database's lock (omni/lock.py)."""


def internal(exc: Exception, what: str) -> OmniError:
    """The error a request ends with for `exc`: itself where it is an OmniError (written for
    clients, or hidden by `public`); else the server's generic error, `exc` going to the log
    (`what`: the request, for the operator)."""
    if isinstance(exc, OmniError):
        return exc
    log.error("%s: %s: %s", what, type(exc).__name__, exc, exc_info=exc)
    return OmniError(SERVER_ERROR)
