"""An object's turns, for people: every response of its `previous_response_id` chain, or of
its conversation, in order, each with its whole input and its output, linked both ways."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import text

from omni.inspect.folding import ShownCall, json_object
from omni.inspect.inputs import InputItem
from omni.inspect.reading import Inspector
from omni.inspect.records import Detail
from omni.vocabulary import CONVERSATION_ITEM_ADDED

MAX_TURNS = 200  # a page of turns; a longer chain says it was cut


def _only(owner: str | None) -> str:
    """Every read keeps to the owner's responses where one is given."""
    return "" if owner is None else "AND owner = :owner"


@dataclass(frozen=True)
class Turn:
    """One response of a chain or conversation: what it was given and what it said."""

    id: str
    kind: str
    status: str
    created: str
    model: str | None
    previous: str | None  # the turn before it (its previous_response_id, or in its conversation)
    next: list[str]  # the turns that go on from it: more than one where the chain forks
    input: list[InputItem]  # its own input items, whole (not those of the turns before)
    output_text: str
    tool_calls: list[ShownCall]
    reasoning: str
    refusal: str
    error: dict[str, Any] | None


@dataclass(frozen=True)
class Turns:
    """The turns around `id`: `chain` says what links them ("previous_response_id",
    "conversation", or "none" for an object that stands alone)."""

    id: str
    chain: str
    conversation: str | None
    turns: list[Turn] = field(default_factory=list)
    truncated: bool = False  # more than MAX_TURNS: those nearest `id` are kept

    def to_json(self) -> dict[str, Any]:
        return {
            "object": "list",
            "id": self.id,
            "chain": self.chain,
            "conversation": self.conversation,
            "truncated": self.truncated,
            "data": [asdict(t) for t in self.turns],
        }


def turns(ins: Inspector, object_id: str, owner: str | None = None) -> Turns | None:
    """`object_id`'s turns (None for an unknown id, or another key's)."""
    shown = ins.detail(object_id, owner)
    if shown is None:
        return None
    kind = shown.summary.kind
    conversation = object_id if kind == "conversation" else shown.conversation
    forks: dict[str, list[str]] = {}
    if conversation is not None:
        ids, chain = _in_conversation(ins, conversation), "conversation"
    elif kind == "response":
        before = _before(ins, object_id, owner)
        forks = _followers(ins, before[0] if before else object_id, owner)
        ids = [*before, object_id, *_after(object_id, forks)]
        chain = "previous_response_id" if len(ids) > 1 else "none"
    else:
        ids, chain = [object_id], "none"
    cut = len(ids) > MAX_TURNS
    if cut:
        at = ids.index(object_id) if object_id in ids else 0
        start = max(0, min(at - MAX_TURNS // 2, len(ids) - MAX_TURNS))
        ids = ids[start : start + MAX_TURNS]
    details = [d for d in (ins.detail(i, owner) for i in ids) if d is not None]
    made = [_turn(d, details, i, forks, chain) for i, d in enumerate(details)]
    return Turns(object_id, chain, conversation, made, cut)


def _turn(
    d: Detail, details: list[Detail], i: int, forks: dict[str, list[str]], chain: str
) -> Turn:
    s = d.summary
    if chain == "conversation":
        previous = details[i - 1].summary.id if i else None
        after = [details[i + 1].summary.id] if i + 1 < len(details) else []
    else:
        previous, after = d.previous_response_id, forks.get(s.id, [])
    return Turn(
        id=s.id,
        kind=s.kind,
        status=s.status,
        created=s.created,
        model=s.model,
        previous=previous,
        next=after,
        input=d.request["input"],
        output_text=d.output_text,
        tool_calls=d.tool_calls,
        reasoning=d.reasoning,
        refusal=d.refusal,
        error=d.error,
    )


def _before(ins: Inspector, object_id: str, owner: str | None) -> list[str]:
    """The responses before `object_id` in its chain, first first: by id, each a lookup."""
    found: list[str] = []
    at: str | None = object_id
    while len(found) < MAX_TURNS:
        row = ins.conn.execute(
            text(f"SELECT previous_response_id FROM summaries WHERE id = :id {_only(owner)}"),
            {"id": at, "owner": owner},
        ).first()
        previous = None if row is None else row[0]
        if previous is None or previous in found or not _owned(ins, previous, owner):
            break
        at = previous
        found.append(previous)
    return found[::-1]


def _owned(ins: Inspector, object_id: str, owner: str | None) -> bool:
    query = f"SELECT 1 FROM summaries WHERE id = :id {_only(owner)}"
    return ins.conn.execute(text(query), {"id": object_id, "owner": owner}).first() is not None


def _after(object_id: str, followers: dict[str, list[str]]) -> list[str]:
    """The responses after `object_id`: each its predecessor's first follower."""
    found: list[str] = []
    at = object_id
    while followers.get(at) and len(found) < MAX_TURNS:
        at = followers[at][0]
        found.append(at)
    return found


def _followers(ins: Inspector, root: str, owner: str | None) -> dict[str, list[str]]:
    """The responses that go on from each response of `root`'s chain, in order (more than one
    where it forks). No index reads previous_response_id: one pass over the rows after it."""
    rows = ins.conn.execute(
        text(
            "SELECT id, previous_response_id FROM summaries WHERE position >"
            " (SELECT position FROM summaries WHERE id = :id)"
            f" AND previous_response_id IS NOT NULL {_only(owner)} ORDER BY position"
        ),
        {"id": root, "owner": owner},
    )
    followers: dict[str, list[str]] = {root: []}
    for child, parent in rows:
        if parent in followers:
            followers[parent].append(str(child))
            followers[str(child)] = []
    return followers


def _in_conversation(ins: Inspector, conversation: str) -> list[str]:
    """The responses whose turns a conversation holds, in the order they were added."""
    ids: dict[str, None] = {}
    for _, type_, data in ins.events(conversation):
        if type_ == CONVERSATION_ITEM_ADDED:
            rid = json_object(data).get("response_id")
            if isinstance(rid, str):
                ids.setdefault(rid)
    return list(ids)
