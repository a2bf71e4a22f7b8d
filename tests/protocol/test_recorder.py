"""The recorder: engine outputs (Delta / Finished / Failed) → OpenAI stream events."""

from __future__ import annotations

import copy

import pytest

from omni.ports.chat import ToolFormat
from omni.ports.jobs import Delta, Failed, Finished
from omni.protocol.recorder import ResponseRecorder, usage
from omni.tools.calls import CallSplitter
from omni.vocabulary import RESPONSE_ENDS
from tests.projections._events import base_response, record
from tests.protocol.test_chunk_recorder import CALL_OUTPUTS, TOOLS

OPENING = ["response.created", "response.in_progress"]
ITEM_OPEN = ["response.output_item.added", "response.content_part.added"]
ITEM_CLOSE = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def types(events):  # type: ignore[no-untyped-def]
    return [e["type"] for e in events]


def test_opening_events_have_empty_output_and_no_usage() -> None:
    rec = ResponseRecorder(base_response(), next_seq=0)
    created, in_progress = rec.opening()
    assert (created["type"], in_progress["type"]) == tuple(OPENING)
    for e in (created, in_progress):
        assert e["response"]["output"] == []
        assert e["response"]["status"] == "in_progress"
        assert e["response"]["usage"] is None
    assert [created["sequence_number"], in_progress["sequence_number"]] == [0, 1]
    assert rec.next_seq == 2 and not rec.done


def test_completed_event_order_and_text() -> None:
    rec, events = record([Delta("Hel", 1), Delta("lo", 2), Delta("!", 3), Finished("stop", 7, 3)])
    assert types(events) == [
        *OPENING,
        *ITEM_OPEN,
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        *ITEM_CLOSE,
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert rec.done
    added, part_added = events[2], events[3]
    item_id = added["item"]["id"]
    assert item_id.startswith("msg_")
    assert added["item"] == {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    assert part_added["part"] == {
        "type": "output_text",
        "text": "",
        "annotations": [],
        "logprobs": [],
    }
    for e in events[3:-2]:
        assert (e["item_id"], e["output_index"], e["content_index"]) == (item_id, 0, 0)
    assert [e["delta"] for e in events[4:7]] == ["Hel", "lo", "!"]
    assert all(e["logprobs"] == [] for e in events[4:8])
    assert events[7]["text"] == "Hello!"
    assert events[8]["part"]["text"] == "Hello!"
    done_item = events[9]["item"]
    assert done_item["status"] == "completed" and done_item["id"] == item_id
    assert done_item["content"] == [
        {"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}
    ]
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"] == [done_item]
    assert final["usage"] == usage(7, 3)
    assert final["usage"]["input_tokens_details"]["cache_write_tokens"] == 0
    assert final["usage"]["total_tokens"] == 10
    assert isinstance(final["completed_at"], int)
    assert final["incomplete_details"] is None and final["error"] is None


def test_usage_carries_cached_tokens() -> None:
    _, events = record([Delta("a", 1), Finished("stop", 10, 1, cached_tokens=6)])
    u = events[-1]["response"]["usage"]
    assert u["input_tokens"] == 10
    assert u["input_tokens_details"] == {"cached_tokens": 6, "cache_write_tokens": 0}
    assert u["output_tokens"] == 1 and u["total_tokens"] == 11
    assert u["output_tokens_details"] == {"reasoning_tokens": 0}


def test_length_gives_incomplete() -> None:
    _, events = record([Delta("ab", 1), Delta("c", 2), Finished("length", 4, 2)])
    assert types(events)[-4:] == [*ITEM_CLOSE, "response.incomplete"]
    final = events[-1]["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["completed_at"] is None
    assert final["output"][0]["status"] == "incomplete"
    assert events[-2]["item"]["status"] == "incomplete"
    assert final["output"][0]["content"][0]["text"] == "abc"
    assert final["usage"]["output_tokens"] == 2


def test_cancelled_gives_cancelled_status() -> None:
    _, events = record([Delta("x", 1), Finished("cancelled", 3, 1)])
    terminal = events[-1]
    assert terminal["type"] in RESPONSE_ENDS
    final = terminal["response"]
    assert final["status"] == "cancelled"
    assert final["completed_at"] is None
    assert final["output"][0]["status"] == "incomplete"
    assert final["usage"]["output_tokens"] == 1


def test_failed_after_deltas_closes_the_item() -> None:
    rec, events = record([Delta("par", 1), Failed("boom")])
    assert types(events) == [
        *OPENING,
        *ITEM_OPEN,
        "response.output_text.delta",
        *ITEM_CLOSE,
        "response.failed",
    ]
    assert rec.done
    final = events[-1]["response"]
    assert final["status"] == "failed"
    assert final["error"] == {"code": "server_error", "message": "boom"}
    assert final["output"][0]["status"] == "incomplete"
    assert final["output"][0]["content"][0]["text"] == "par"
    assert "error" not in {k for e in events for k in e}  # no top-level error key in events


def test_failed_before_any_delta_has_no_items() -> None:
    _, events = record([Failed("engine died")])
    assert types(events) == [*OPENING, "response.failed"]
    assert events[-1]["response"]["output"] == []
    assert events[-1]["response"]["error"]["code"] == "server_error"


@pytest.mark.parametrize(("reason", "status"), [("stop", "completed"), ("length", "incomplete")])
def test_empty_output_still_yields_one_message_item(reason: str, status: str) -> None:
    _, events = record([Finished(reason, 5, 0)])  # type: ignore[arg-type]
    assert types(events) == [*OPENING, *ITEM_OPEN, *ITEM_CLOSE, f"response.{status}"]
    final = events[-1]["response"]
    assert len(final["output"]) == 1
    item = final["output"][0]
    assert item["type"] == "message" and item["status"] == status
    assert item["content"][0]["text"] == ""
    assert events[2]["item"]["id"] == item["id"]
    assert final["usage"]["output_tokens"] == 0


def test_seq_numbering_continues_from_next_seq() -> None:
    rec = ResponseRecorder(base_response(), next_seq=7)
    events = rec.on_output(Delta("a", 1)) + rec.on_output(Finished("stop", 2, 1))
    assert [e["sequence_number"] for e in events] == list(range(7, 7 + len(events)))
    assert rec.next_seq == 7 + len(events)
    assert events[0]["type"] == "response.output_item.added"


def test_seq_numbering_across_separate_batches() -> None:
    rec = ResponseRecorder(base_response(), next_seq=0)
    seqs = [e["sequence_number"] for e in rec.opening()]
    for out in (Delta("a", 1), Delta("b", 2), Delta("c", 3), Finished("length", 3, 3)):
        first = rec.next_seq
        batch = rec.on_output(out)
        assert batch[0]["sequence_number"] == first
        seqs += [e["sequence_number"] for e in batch]
    assert seqs == list(range(len(seqs)))


def test_recorder_does_not_mutate_the_given_response() -> None:
    response = base_response()
    snapshot = copy.deepcopy(response)
    record([Delta("a", 1), Finished("stop", 1, 1)], response=response)
    assert response == snapshot


def test_lifecycle_events_are_snapshots() -> None:
    """Later changes must not leak into earlier events' response objects."""
    _, events = record([Delta("a", 1), Finished("stop", 1, 1)])
    assert events[0]["response"]["output"] == []
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["usage"] is None
    assert events[1]["response"]["output"] == []


def test_every_lifecycle_event_keeps_the_response_id() -> None:
    _, events = record([Delta("a", 1), Finished("stop", 1, 1)], base_response("resp_same"))
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert ids == {"resp_same"}


def test_reasoning_tokens_count_generated_tokens_only() -> None:
    """Inside a think block each generated token is a reasoning token; the detokenizer's last
    flush (text of no new token) is not one, so reasoning never exceeds output tokens."""
    from omni.protocol.thinking import ThinkSplitter

    rec = ResponseRecorder(base_response(), 0, thinker=ThinkSplitter("<think>", "</think>", True))
    events = rec.opening()
    for out in [Delta("hmm", 1), Delta(" ok", 2), Delta(" ", None), Finished("length", 5, 2)]:
        events += rec.on_output(out)
    u = events[-1]["response"]["usage"]
    assert (u["output_tokens"], u["output_tokens_details"]["reasoning_tokens"]) == (2, 2)


@pytest.mark.parametrize(("fmt", "output", "complete"), CALL_OUTPUTS, ids=["plain", "hermes"])
def test_calls_cut_by_the_limit_keep_the_complete_ones(
    fmt: ToolFormat, output: str, complete: tuple[int, int]
) -> None:
    """Cut at every character: the calls completed before the cut are function_call items,
    no text is said but what came before the calls, and the response is incomplete."""
    before = output[: output.find("<tool_call>")] if fmt.start else ""
    for i in range(1, len(output)):
        rec = ResponseRecorder(base_response(), 0, splitter=CallSplitter(fmt, TOOLS))
        events = rec.opening()
        for out in [*(Delta(c, n) for n, c in enumerate(output[:i])), Finished("length", 5, i)]:
            events += rec.on_output(out)
        said = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert said == before[:i], (i, said)
        final = events[-1]["response"]
        assert events[-1]["type"] == "response.incomplete"
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
        called = [item["name"] for item in final["output"] if item["type"] == "function_call"]
        assert called == ["get_weather", "get_time"][: sum(i >= at for at in complete)], i
        messages = [item for item in final["output"] if item["type"] == "message"]
        assert len(messages) == (1 if said else 0), i  # no empty message where a call was cut
