"""API keys: where they come from, and which one a request carries.

A key is known by its name (`name:key` in a key file) or by a short hash of it; that owner
name is what the log records, never the key itself. A key file's line may end with `admin`:
that key's reads in the inspector show every key's rows (an operator's view).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omni.errors import OmniError, Unauthorized

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class ApiKey:
    owner: str  # the key's name, or "key-" and the start of its SHA-256
    digest: bytes  # SHA-256 of the key: compared in constant time, whatever its length
    admin: bool = False  # sees every key's rows in the inspector


FLAGS = ("admin",)


def api_key(secret: str, name: str | None = None, admin: bool = False) -> ApiKey:
    digest = hashlib.sha256(secret.encode()).digest()
    return ApiKey(name or f"key-{digest.hex()[:12]}", digest, admin)


def read_key_file(path: str) -> list[ApiKey]:
    """One key a line, optionally `name:key` (a name of letters, digits, `_.-`, up to 64),
    then flags after a space (`admin`); blank lines and lines starting with # are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OmniError(f"cannot read the API key file {path}: {exc}") from None
    keys = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line, *flags = line.split()  # a key has no spaces: a bearer header could not send one
        if unknown := [f for f in flags if f not in FLAGS]:
            raise OmniError(f"{path}, line {number}: unknown flag {unknown[0]!r} (known: admin)")
        name, sep, secret = line.partition(":")
        if not sep or not NAME.fullmatch(name.strip()):  # a colon inside a bare key
            name, secret = "", line
        if not secret.strip():
            raise OmniError(f"{path}, line {number}: the key is empty")
        keys.append(api_key(secret.strip(), name.strip() or None, "admin" in flags))
    return keys


class KeyRing:
    """The keys a server accepts; none configured means every request is let in."""

    def __init__(self, keys: Iterable[ApiKey] = ()):
        self.keys = tuple(keys)
        owners = [k.owner for k in self.keys]
        if len(set(owners)) != len(owners):
            raise OmniError("two API keys have the same name")
        self.admins = frozenset(k.owner for k in self.keys if k.admin)

    @classmethod
    def from_secrets(cls, *secrets: str) -> KeyRing:
        return cls(api_key(s) for s in secrets)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def owner(self, authorization: str | None) -> str | None:
        """The owner of the request's `Authorization: Bearer KEY`; None where no keys are
        set. Every key is compared (in constant time), so timing tells nothing of which."""
        if not self.keys:
            return None
        scheme, _, secret = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthorized(
                "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' "
                "(or 'x-api-key: KEY')."
            )
        digest = hashlib.sha256(secret.strip().encode()).digest()
        found = None
        for key in self.keys:
            if hmac.compare_digest(digest, key.digest):
                found = key.owner
        if found is None:
            raise Unauthorized("Incorrect API key provided.")
        return found
