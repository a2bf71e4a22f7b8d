"""The Responses API's queries over the event log: a response's accepted request, its state
as the log stands, its events (followed live), its items and its chain's. Its commands are
omni.service.responses's."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from omni.errors import InvalidRequest, NotFound
from omni.events import EventLog, Notifier, StoredEvent, follow, follow_pages
from omni.projections.input_items import page_items
from omni.projections.response import fold_response
from omni.service.ownership import visible
from omni.service.streams import is_kind, is_terminal, kept, request_stream
from omni.vocabulary import ACCEPTED, DELETED, FINAL_STATUSES, ID_PREFIXES, RESPONSE


class ResponseQueries:
    def __init__(self, store: EventLog, notifier: Notifier, keepalive: float):
        self.store = store
        self.notifier = notifier
        self.keepalive = keepalive

    async def accepted(self, response_id: str) -> tuple[dict[str, Any], list[StoredEvent]]:
        """The accepted request and the later facts of a response, else 404: for an id of
        another kind too (a chat completion's stream is no response), before anything else."""
        missing = NotFound(f"No response found with id '{response_id}'.")
        if not response_id.startswith(ID_PREFIXES[RESPONSE]):
            raise missing
        rows = await self.store.read(request_stream(response_id))
        if not rows or rows[0].type != ACCEPTED or any(r.type == DELETED for r in rows):
            raise missing
        request = json.loads(rows[0].data)
        if not is_kind(response_id, request, RESPONSE):
            raise missing
        return request, rows[1:]

    async def _accepted(self, response_id: str, owner: str | None) -> dict[str, Any]:
        """The accepted request of a stored, undeleted response of `owner`'s, else 404."""
        request, _ = await self.accepted(response_id)
        if not kept(request) or not visible(request, owner):
            raise NotFound(f"No response found with id '{response_id}'.")
        return request

    async def retrieve(self, response_id: str, owner: str | None = None) -> dict[str, Any]:
        await self._accepted(response_id, owner)
        found = await self.snapshot(response_id)
        if not found:  # purged between the two reads (retention, a delete)
            raise NotFound(f"No response found with id '{response_id}'.")
        return found

    async def snapshot(self, response_id: str) -> dict[str, Any]:
        """The response as its log stands (a terminal event is read alone)."""
        last = await self.store.last(response_id)
        if last is not None and is_terminal(last):
            return dict(json.loads(last.data)["response"])
        rows = await self.store.read(response_id)
        return fold_response([(r.type, r.data) for r in rows])

    def events(self, response_id: str, after: int = -1) -> AsyncGenerator[StoredEvent | None, None]:
        return follow(self.store, self.notifier, response_id, after, is_terminal, self.keepalive)

    def pages(
        self, response_id: str, after: int = -1
    ) -> AsyncGenerator[list[StoredEvent] | None, None]:
        """events(), a read at a time (a stream sends each in one write). At a stop, the
        stream ends after what is committed: a background response goes on at the next
        start, where its client resumes from the last event it got."""
        return follow_pages(
            self.store,
            self.notifier,
            response_id,
            after,
            is_terminal,
            self.keepalive,
            ends_at_stop=True,
        )

    async def wait(self, response_id: str) -> dict[str, Any]:
        """Follow to the terminal event and return the final response."""
        async for event in self.events(response_id):
            if event is not None and is_terminal(event):
                return dict(json.loads(event.data)["response"])
        return await self.snapshot(response_id)  # it had ended before we looked

    async def stored_items(self, response_id: str, owner: str | None) -> list[dict[str, Any]]:
        """The input and output items of `owner`'s stored response, else 404."""
        request = await self._accepted(response_id, owner)
        output = (await self.snapshot(response_id)).get("output") or []
        return [*request["input"], *output]

    async def input_items(
        self, response_id: str, after: str | None, limit: int, order: str, owner: str | None = None
    ) -> dict[str, Any]:
        request = await self._accepted(response_id, owner)
        return page_items(request["input"], after, limit, order)  # type: ignore[arg-type]

    async def _history(self, previous_id: str | None, owner: str | None) -> list[dict[str, Any]]:
        """The chain's input and output items, oldest first (instructions are not carried)."""
        if previous_id is None:
            return []
        try:
            request = await self._accepted(previous_id, owner)
        except NotFound:
            raise InvalidRequest(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            ) from None
        previous = await self.snapshot(previous_id)
        if previous.get("status") not in FINAL_STATUSES:
            raise InvalidRequest(
                f"Previous response '{previous_id}' is still {previous.get('status')}.",
                param="previous_response_id",
            )
        earlier = await self._history(request["body"].get("previous_response_id"), owner)
        items: list[dict[str, Any]] = [*earlier, *request["input"], *previous["output"]]
        return items
