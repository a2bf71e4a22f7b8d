"""Stored chat completions (all but `store: false`): list, retrieve, messages, metadata, delete.

All projections of the log: the accepted request, metadata updates and a tombstone live on
`chatcmpl-X/request`; the completion itself is the fold of `chatcmpl-X`. As at OpenAI, only
answers are stored: a completion that ended in an error or was cancelled (a failed generation,
a client gone, a restart that cut it off) is not one, though the log keeps all it holds.
"""

from __future__ import annotations

import json
from typing import Any

from omni.errors import InvalidRequest, NotFound
from omni.events import Append, Appender, EventLog, NewEvent
from omni.projections.completions import fold_chat
from omni.projections.input_items import page_items
from omni.service.ownership import visible
from omni.service.serial import ObjectLocks
from omni.service.streams import dumps, is_kind, kept, request_stream
from omni.vocabulary import (
    ACCEPTED,
    CHAT,
    COMPLETION_CANCELLED,
    COMPLETION_DELETED,
    COMPLETION_ERROR,
    ID_PREFIXES,
    METADATA_UPDATED,
)

UNANSWERED = (COMPLETION_ERROR, COMPLETION_CANCELLED)


class StoredCompletions:
    def __init__(self, store: EventLog, appender: Appender):
        self.store = store
        self.appender = appender
        self.facts = ObjectLocks()  # a completion's updates and delete, one at a time

    async def _facts(
        self, cid: str, owner: str | None
    ) -> tuple[dict[str, Any], dict[str, str], int]:
        """The accepted request, current metadata and next request-stream seq of `owner`'s
        stored completion, else 404."""
        missing = NotFound(f"No stored chat completion found with id '{cid}'.")
        if not cid.startswith(ID_PREFIXES[CHAT]):  # a response's id, say: not even read
            raise missing
        rows = await self.store.read(request_stream(cid))
        request = json.loads(rows[0].data) if rows and rows[0].type == ACCEPTED else None
        if (
            request is None
            or not is_kind(cid, request, CHAT)
            or not kept(request)
            or not visible(request, owner)
            or any(r.type == COMPLETION_DELETED for r in rows)
        ):
            raise missing
        last = await self.store.last(cid)
        if last is not None and last.type in UNANSWERED:
            raise missing
        metadata = request["body"].get("metadata") or {}
        for row in rows:
            if row.type == METADATA_UPDATED:
                metadata = json.loads(row.data)["metadata"]
        return request, metadata, len(rows)

    async def _append_fact(self, cid: str, owner: str | None, type_: str, data: str = "{}") -> None:
        """Append a fact to `owner`'s completion, else 404; run holding its lock (so every
        concurrent update lands, in turn)."""
        _, _, seq = await self._facts(cid, owner)
        await self.appender.append(Append(request_stream(cid), seq, [NewEvent(type_, data)]))

    async def retrieve(self, cid: str, owner: str | None = None) -> dict[str, Any]:
        _, metadata, _ = await self._facts(cid, owner)
        return await self._view(cid, metadata)

    async def _view(self, cid: str, metadata: dict[str, str]) -> dict[str, Any]:
        events = await self.store.read(cid)
        if not events:  # purged since its facts were read (retention, a delete)
            raise NotFound(f"No stored chat completion found with id '{cid}'.")
        return {**fold_chat([(e.type, e.data) for e in events]), "metadata": metadata}

    async def list(
        self,
        model: str | None,
        metadata: dict[str, str],
        after: str | None,
        limit: int,
        order: str,
        owner: str | None = None,
    ) -> dict[str, Any]:
        accepted = [
            e for e in await self.store.by_type(ACCEPTED) if e.stream_id.startswith("chatcmpl-")
        ]
        gone = {e.stream_id for e in await self.store.by_type(COMPLETION_DELETED)}
        for kind in UNANSWERED:
            gone |= {f"{e.stream_id}/request" for e in await self.store.by_type(kind)}
        current: dict[str, dict[str, str]] = {}
        for e in await self.store.by_type(METADATA_UPDATED):
            current[e.stream_id] = json.loads(e.data)["metadata"]
        rows = []
        for e in accepted:
            request = json.loads(e.data)
            body = request["body"]
            meta = current.get(e.stream_id, body.get("metadata") or {})
            if not kept(request) or e.stream_id in gone or not visible(request, owner):
                continue
            if model is not None and body.get("model") != model:
                continue
            if any(meta.get(k) != v for k, v in metadata.items()):
                continue
            rows.append({"id": e.stream_id.removesuffix("/request"), "metadata": meta})
        page = page_items(rows, after, limit, order)  # type: ignore[arg-type]
        page["data"] = [await self._view(r["id"], r["metadata"]) for r in page["data"]]
        return page

    async def messages(
        self, cid: str, after: str | None, limit: int, order: str, owner: str | None = None
    ) -> dict[str, Any]:
        request, _, _ = await self._facts(cid, owner)
        items = []
        for i, message in enumerate(request["body"]["messages"]):
            content = message.get("content")
            parts = content if isinstance(content, list) else None
            if parts is not None:
                content = "".join(p.get("text") or "" for p in parts)
            items.append(
                {**message, "id": f"{cid}-{i}", "content": content, "content_parts": parts}
            )
        return page_items(items, after, limit, order)  # type: ignore[arg-type]

    async def update(self, cid: str, body: Any, owner: str | None = None) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict | None):
            raise InvalidRequest('The body must be {"metadata": {...}}.', param="metadata")
        metadata = body.get("metadata") or {}
        if len(metadata) > 16 or any(
            not isinstance(v, str) or len(k) > 64 or len(v) > 512 for k, v in metadata.items()
        ):
            raise InvalidRequest(
                "metadata: at most 16 string values, keys ≤ 64 and values ≤ 512 characters.",
                param="metadata",
            )
        event = dumps({"metadata": metadata})
        await self.facts.run(cid, lambda: self._append_fact(cid, owner, METADATA_UPDATED, event))
        return await self._view(cid, metadata)

    async def delete(self, cid: str, owner: str | None = None) -> dict[str, Any]:
        # Once: deletes after the first find it deleted (404).
        await self.facts.run(cid, lambda: self._append_fact(cid, owner, COMPLETION_DELETED))
        return {"id": cid, "object": "chat.completion.deleted", "deleted": True}
