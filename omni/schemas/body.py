"""A request's body: its JSON read strictly, then validated by the endpoint's pydantic model."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from omni.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)
# A \uD800-\uDFFF escape: JSON allows one alone, Unicode text (UTF-8, SQLite) does not.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def load_json(raw: bytes | str) -> Any:
    """The request body's JSON; malformed JSON, or a string holding a lone surrogate escape
    ("\ud800" without its pair: no text can hold it, nor can the log), is a 400."""
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:  # nested deeper than the parser (or anything after it) can follow
        raise InvalidRequest("The request body's JSON is nested too deeply.") from None
    body = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _SURROGATE_ESCAPE.search(body):  # rare: then check the strings for real
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(
                "The request body holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape "
                "without its pair), which is not valid Unicode text."
            ) from None
    return data


def parse_body(raw: bytes | str, model: type[M]) -> M:
    """The body as `model`: malformed JSON and invalid fields become 400s naming the
    parameter."""
    data = load_json(raw)
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return validate(data, model)


def validate(data: dict[str, Any], model: type[M]) -> M:
    """A JSON object already read (a WebSocket message's) as `model`: invalid fields become
    400s naming the parameter."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise InvalidRequest(f"Invalid value for '{param}': {err['msg']}", param=param) from None
