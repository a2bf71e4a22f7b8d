"""Recovery: no response is left without a terminal event after a crash, taken up at the next
start, by the server that takes over another's expired lease, or, for one background response,
once the model whose engine died under it is loaded again (omni.service.runs):

- a queued background response is run;
- a running background response carries on from its last recorded token, its stream simply
  continuing with the next sequence_number (or, if this server cannot continue it exactly,
  ends `incomplete` with the reason in `error`);
- a foreground response (its client is gone with the old process) ends `failed`;
- a `store: false` leftover is purged.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from omni.errors import InvalidRequest, ModelLoadError, NotFound, OmniError
from omni.events import Append, Appender, EventLog, NewEvent, StoredEvent
from omni.ports.chat import Engine
from omni.ports.jobs import Failed, Finished
from omni.projections.response import fold_response
from omni.protocol.recorder import ResponseRecorder
from omni.service.conversations import ConversationsService
from omni.service.image_urls import Fetcher
from omni.service.models import Models
from omni.service.plan import stored_plan
from omni.service.reasoning import reasoning_tokens
from omni.service.run import Run
from omni.service.runs import Runs
from omni.service.streams import dumps, kept, progress_stream, request_stream, tokens_stream
from omni.service.vision_inputs import ImageRef, load_images, pictures
from omni.vocabulary import CANCEL_REQUESTED, RESPONSE_ENDS


class ResponsesService(Protocol):
    """What recovery asks of the Responses service (omni.service.responses)."""

    store: EventLog
    appender: Appender
    runs: Runs
    models: Models
    image_fetcher: Fetcher | None
    conversations: ConversationsService  # a turn of one joins it as it ends

    async def accepted(self, response_id: str) -> tuple[dict[str, Any], list[StoredEvent]]: ...


log = logging.getLogger(__name__)

RESTARTED = "The server restarted before this response finished."


async def recover(service: ResponsesService, among: Sequence[str] | None = None) -> int:
    """Every unfinished response this server may take (all, on a log of its own; those whose
    lease is gone or expired, on a shared one), or only those `among` these."""
    unfinished = await service.store.unfinished("response.created", sorted(RESPONSE_ENDS))
    runs = service.runs
    # What runs on here keeps its lease until its run ends.
    async with runs.leasing.taking(
        unfinished, among, keep=lambda s: runs.get(s) is not None
    ) as taken:
        await _recover(service, taken)
    if taken:  # after a restart, another server's expired lease, or a dead engine
        log.warning("took up %d unfinished responses", len(taken))
    return len(taken)


async def _recover(service: ResponsesService, unfinished: list[str]) -> None:
    for response_id in unfinished:
        await _recover_one(service, response_id)


async def _recover_one(service: ResponsesService, response_id: str) -> None:
    store = service.store
    rows = await store.read(response_id)
    first = rows[-1].seq + 1
    folded = fold_response([(r.type, r.data) for r in rows])
    try:
        request, facts = await service.accepted(response_id)
    except NotFound:  # deleted while it ran: just close it
        recorder = ResponseRecorder.resume(folded, first)
        await _finish(service, response_id, first, recorder.on_failed(Failed(RESTARTED)))
        return
    if not kept(request):
        await store.purge([response_id, request_stream(response_id)])
        return
    if not request["body"].get("background"):
        recorder = ResponseRecorder.resume(folded, first)
        await _finish(service, response_id, first, recorder.on_failed(Failed(RESTARTED)))
        return
    await _continue(service, response_id, first, folded, request, facts)


async def _engine(service: ResponsesService, request: dict[str, Any]) -> Engine | str:
    """The model a background run began on, loaded; else why it cannot be continued."""
    model_id = str(request.get("model_id"))
    if (variant := request.get("variant")) is not None:  # with its adapters, its draft
        with contextlib.suppress(OmniError):  # gone: the model is not found, just below
            service.models.variant_id(variant)
    try:
        return await service.models.engine(model_id)
    except (NotFound, InvalidRequest):
        served = ", ".join(f"'{e.id}'" for e in service.models.entries() if e.kind == "chat")
        return (
            f"The server restarted without the model '{model_id}' that generated this "
            f"response (it serves {served}), so it cannot be continued exactly."
        )
    except ModelLoadError:
        return (
            f"The model '{model_id}' that generated this response could not be loaded "
            "again (the server's log says why), so it cannot be continued exactly."
        )


async def _continue(
    service: ResponsesService,
    response_id: str,
    first: int,
    folded: dict[str, Any],
    request: dict[str, Any],
    facts: list[StoredEvent],
) -> None:
    """A background run goes on as it was planned, on the model it began on: calls and
    reasoning read out of the text as they were before the restart."""
    prompt: list[int] = request["prompt"]
    token_rows = await service.store.read(tokens_stream(response_id))
    tokens = [t for row in token_rows for t in json.loads(row.data)]
    cancelled = any(f.type == CANCEL_REQUESTED for f in facts)
    engine = await _engine(service, request)
    if isinstance(engine, str) and service.runs.closing:  # the next start continues it
        return
    if isinstance(engine, str):
        await _end(service, response_id, first, folded, cancelled, prompt, tokens, engine)
        return
    plan = stored_plan(engine, request)
    recorder = ResponseRecorder.resume(
        folded, first, plan.splitter(engine), plan.thinker(engine, prompt)
    )
    fresh = plan.thinker(engine, prompt)  # the recorder counts from here on
    if recorder.thinker is not None and fresh is not None and tokens:
        recorder.reasoning_tokens = reasoning_tokens(engine, fresh, tokens)
    if cancelled:
        end = Finished("cancelled", len(prompt), len(tokens))
        await _finish(service, response_id, first, recorder.on_finished(end))
        return
    refs = [ImageRef(url, "input") for url in request.get("images") or []]
    try:  # the images its prompt shows, read again from their URLs
        loaded = await load_images(refs, service.image_fetcher)
    except InvalidRequest as exc:
        reason = f"Its images could not be read again after the restart ({exc.message})."
        await _end(service, response_id, first, folded, cancelled, prompt, tokens, reason)
        return
    job = plan.job(prompt, tokens, pictures(refs, loaded))
    run = Run(response_id, recorder, job, engine, True, True, tokens_seq=len(token_rows))
    run.progress_seq = len(await service.store.read(progress_stream(response_id)))
    run.ending = service.conversations.ending(folded, request["input"], recorder)
    service.runs.start(run)
    log.info("continuing %s after %d recorded tokens", response_id, len(tokens))


async def _finish(
    service: ResponsesService, response_id: str, first: int, events: list[dict[str, object]]
) -> None:
    rows = [NewEvent(str(e["type"]), dumps(e)) for e in events]
    await service.appender.append(Append(response_id, first, rows))


async def _end(
    service: ResponsesService,
    response_id: str,
    first: int,
    folded: dict[str, Any],
    cancelled: bool,
    prompt: list[int],
    tokens: list[int],
    reason: str,
) -> None:
    """End a background run whose model is gone: cancelled if asked, else incomplete."""
    recorder = ResponseRecorder.resume(folded, first)
    if cancelled:
        events = recorder.on_finished(Finished("cancelled", len(prompt), len(tokens)))
    else:
        events = recorder.on_abandoned(reason)
    await _finish(service, response_id, first, events)
