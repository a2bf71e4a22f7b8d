"""One generation being recorded: its job on an engine, its recorder, and what the recording
knows of it (omni.service.runs records it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from omni.events import Append
from omni.ports.chat import Engine
from omni.ports.jobs import Failed, Job
from omni.protocol.chat_recorder import ChunkRecorder
from omni.protocol.message_recorder import MessageRecorder
from omni.protocol.recorder import ResponseRecorder


@dataclass(eq=False)
class Run:
    """One generation being recorded: a response (ResponseRecorder), a chat/text completion
    (ChunkRecorder) or a message (MessageRecorder) on stream `stream_id`."""

    stream_id: str
    recorder: ResponseRecorder | ChunkRecorder | MessageRecorder
    job: Job
    engine: Engine  # the model it runs on
    store: bool = True
    background: bool = False
    # Leases it holds beside its stream's, let go with it (a replay-cache flight's key).
    leased: tuple[str, ...] = ()
    tokens_seq: int = 0  # next seq of <stream>/tokens (background runs record their tokens)
    progress_seq: int = 0  # next seq of <stream>/progress (a long prefill's chunks)
    # Single-flight followers copying this stream: while any, a disconnect does not cancel,
    # and an unstored stream is not purged.
    mirrors: int = 0
    on_done: Callable[[], None] | None = None  # called once the recorder has ended it
    read: bool = False  # the creating client has read all it wanted
    # Unstored runs: set once nobody reads the stream any more (read, and no mirror).
    released: asyncio.Event = field(default_factory=asyncio.Event)
    next_seq: int = field(init=False)
    submitted_at: float = field(default_factory=time.perf_counter)  # for /metrics
    first_token_at: float | None = None
    unwritten: BaseException | None = None  # why an append of its events failed
    # A stop of the server: the output that wakes the recorder to end (or leave) the run.
    interruption: Failed | None = None
    detached: bool = False  # a background run left unfinished, for the next start
    crashed: bool = False  # ... its engine having died: it goes on once the model is back
    recorded: asyncio.Event = field(default_factory=asyncio.Event)  # its recording is over
    # Writes the appends of its ending in the appender's stead: a response in a conversation
    # adds its turn to it in the same transaction (omni.service.conversations).
    ending: Callable[[list[Append]], Awaitable[None]] | None = None
    # Its ending is in its opening, and its job never runs (a compaction's response).
    settled: bool = False

    def __post_init__(self) -> None:
        self.next_seq = self.recorder.next_seq

    def settle(self) -> None:
        if self.read and self.mirrors <= 0:
            self.released.set()

    @property
    def response_id(self) -> str:
        return self.stream_id

    @property
    def is_response(self) -> bool:
        return isinstance(self.recorder, ResponseRecorder)

    @property
    def api(self) -> str:
        """Its API, as /metrics labels it: responses, chat, text or messages."""
        recorder = self.recorder
        return "responses" if isinstance(recorder, ResponseRecorder) else recorder.kind
