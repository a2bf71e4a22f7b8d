"""Content sealed for stateless clients: reasoning (`include: ["reasoning.encrypted_content"]`)
and a compacted window (omni.service.compaction). AES-256-GCM with a key kept in OMNI_HOME (or
given by OMNI_REASONING_KEY), so what one process sealed another opens after a restart;
anything altered, or sealed for the other purpose, fails to open."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from omni.errors import InvalidRequest

KEY_FILE = "reasoning.key"
FOR_REASONING = b"omni reasoning v1"  # what a token was sealed for (its associated data)
FOR_WINDOW = b"omni compaction v1"


class Sealer:
    def __init__(self, key: bytes):
        if len(key) != 32:
            raise ValueError("the reasoning key must be 32 bytes (AES-256)")
        self._aead = AESGCM(key)

    @classmethod
    def from_home(cls, home: Path) -> Sealer:
        """OMNI_REASONING_KEY (base64 of 32 bytes), else OMNI_HOME/reasoning.key, made once."""
        if env := os.environ.get("OMNI_REASONING_KEY"):
            return cls(base64.b64decode(env))
        path = home / KEY_FILE
        if not path.exists():
            home.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
        return cls(path.read_bytes())

    def seal(self, content: list[dict[str, Any]], purpose: bytes = FOR_REASONING) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, json.dumps(content).encode(), purpose)
        return base64.b64encode(nonce + sealed).decode()

    def open(self, token: str, param: str, purpose: bytes = FOR_REASONING) -> list[dict[str, Any]]:
        """The content; a 400 if the token was altered, sealed with another key or for
        another purpose."""
        try:
            raw = base64.b64decode(token, validate=True)
            content = json.loads(self._aead.decrypt(raw[:12], raw[12:], purpose))
        except (InvalidTag, ValueError):
            raise InvalidRequest(
                "encrypted_content could not be decrypted: it was altered, or sealed by "
                "another server key.",
                param=param,
                code="invalid_encrypted_content",
            ) from None
        return list(content)
