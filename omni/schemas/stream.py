"""The vocabulary of a response's public stream, shared by the recorder and the folds."""

from __future__ import annotations

# Every response stream ends with exactly one of these.
TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})

# Lifecycle events that carry the whole response while it is not finished yet.
LIFECYCLE_TYPES = frozenset({"response.created", "response.queued", "response.in_progress"})
