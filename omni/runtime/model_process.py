"""A model in a process of its own, spoken to over a pipe: the server's side, which the
embedder, the transcriber, the speaker and the imager share (the process's side:
omni.runtime.model_worker). The process is spawned (never forked from a process that holds
threads) with the engine's BLAS preloaded (omni.runtime.platform.blas: on MLX's CPU build the
matrix products run there), and sends one message once its model is loaded or could not be.
Each request then has an id; a reader thread hands each reply to the event loop that asked, so
the loop never waits on the pipe, and once the process is gone every request still waiting
is told why."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from omni.errors import SERVER_ERROR, ModelLoadError, OmniError
from omni.runtime.chat.wire import Cancel
from omni.runtime.platform import blas

log = logging.getLogger(__name__)
T = TypeVar("T")


class ModelProcess:
    """`what`: the model, for messages ("embedding model"); `name`: the process's name;
    `closing`: the message that asks the process to stop."""

    # What the pool reads (omni.ports.model.Model): loaded once start() returns, requests
    # counted in `running`, and the weights' memory not known (the folder's size counts).
    queued = 0
    loading = False
    load_error: str | None = None
    memory_bytes: int | None = None

    def __init__(self, path: str, what: str, name: str, closing: Any):
        self.path = path
        self.model_id = path  # its id in the catalogue, set by the subclass
        self._what = what
        self._name = name
        self._closing = closing
        self._process: Any = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        # Each request waiting: the loop that asked, and what receives its replies.
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        self._gone: str | None = None  # why the model's process is no longer there
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)

    @property
    def running(self) -> int:
        return len(self._pending)

    def launch(self, target: Callable[..., None], args: tuple[Any, ...], loaded: type) -> Any:
        """Start `target(conn, *args)` in the model's process and wait for its first message:
        returned if it is a `loaded`, else ModelLoadError with the process's reason."""
        ctx = multiprocessing.get_context("spawn")
        conn, child = ctx.Pipe()
        self._process = ctx.Process(target=target, args=(child, *args), name=self._name)
        with blas.preloaded(blas.preload(blas.AUTO)):
            self._process.start()
        child.close()
        try:
            message = conn.recv()
        except EOFError:
            self._process.join()
            why = f"its process exited ({self._process.exitcode})"
        else:
            if isinstance(message, loaded):
                self._conn = conn
                self._reader.start()
                return message
            why = message.message
        conn.close()
        self._process.join(timeout=5)
        self._process = None
        raise ModelLoadError(f"cannot load {self._what} {self.path}: {why}")

    def expect(self, receiver: asyncio.Future[Any] | asyncio.Queue[Any]) -> int:
        """A new request's id, whose replies go to `receiver` on this event loop (deliver());
        OmniError where the model's process is gone."""
        if self._gone is not None:
            raise OmniError(self._gone)
        job_id = next(self._ids)
        self._pending[job_id] = (asyncio.get_running_loop(), receiver)
        return job_id

    async def ask(self, make: Callable[[int], Any]) -> Any:
        """Send `make(id)` and wait for its one answer (answer() of its reply)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job_id = self.expect(future)
        try:
            # A big request is megabytes of pickle: sent from a thread, the loop goes on.
            await asyncio.to_thread(self._send, make(job_id))
            return await future
        finally:
            self._pending.pop(job_id, None)

    async def stream(
        self, make: Callable[[int], Any], read: Callable[[Any], tuple[T, bool]]
    ) -> Replies[T]:
        """Send `make(id)`; its replies, each as `read` makes it a value (and says whether it
        is the last), as they come (omni.ports.model.Answer)."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        job_id = self.expect(queue)
        try:
            # Megabytes of audio, and a busy process reads it only when its request is
            # done: sent from a thread, the loop goes on.
            await asyncio.to_thread(self._send, make(job_id))
        except BaseException:
            self._pending.pop(job_id, None)
            raise
        return Replies(self, job_id, queue, read)

    def failed(self, message: str) -> OmniError:
        """The error of a request its model's process failed: that process's text (an
        exception's) goes to the server's log; the request reads the server's generic error."""
        log.error("the %s %s failed a request: %s", self._what, self.model_id, message)
        return OmniError(SERVER_ERROR)

    def answer(self, reply: Any) -> Any:
        """What ask() returns (or raises, an exception) for `reply` (in the reader thread)."""
        return reply

    def deliver(self, loop: asyncio.AbstractEventLoop, receiver: Any, value: Any) -> None:
        """Hand `value` to a request's receiver, on its loop: ask()'s future, or stream()'s
        queue."""
        if isinstance(receiver, asyncio.Queue):
            try:
                loop.call_soon_threadsafe(receiver.put_nowait, value)
            except RuntimeError:  # that event loop is closed: nobody is left to read it
                pass
        else:
            settle(loop, receiver, value)

    def close(self) -> None:
        """Stop the model's process (requests in progress fail)."""
        if self._process is None:
            return
        self._gone = self._gone or "the server is shutting down"
        try:
            self._send(self._closing)
        except OmniError:
            pass
        stop_process(self._process, self._reader, self._conn)
        self._process = None

    def _send(self, message: Any) -> None:
        if self._conn is None:
            raise OmniError(self._gone or f"the {self._what} is not loaded")
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # the process is gone; the reader reports it
            raise OmniError(self._gone or f"the {self._what}'s process is gone") from None

    def _read(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                break
            entry = self._pending.get(reply.id)
            if entry is not None:  # else its client went away: the reply has no reader
                self.deliver(*entry, self.answer(reply))
        exit_code = self._process.exitcode if self._process is not None else None
        if self._gone is None:
            self._gone = f"the {self._what}'s process exited unexpectedly ({exit_code})"
            log.error("%s", self._gone)
        for loop, receiver in list(self._pending.values()):
            self.deliver(loop, receiver, OmniError(self._gone))


def stop_process(process: Any, reader: threading.Thread, conn: Connection | None) -> None:
    """After a model's process was asked to close: wait for it (ended if it will not), then
    for its reader thread, which ends at the pipe's end that the exit made; the pipe closes
    after it (closed under a recv in progress, recv raised TypeError in that thread)."""
    process.join(timeout=30)
    if process.is_alive():
        process.terminate()
        process.join(timeout=5)
    if reader.is_alive():
        reader.join(timeout=5)
    if conn is not None:
        conn.close()


class Replies(Generic[T]):
    """One request's replies, read from its queue (omni.ports.model.Answer). The reader thread puts
    them there, or the OmniError that says the process is gone."""

    def __init__(
        self,
        process: ModelProcess,
        job_id: int,
        queue: asyncio.Queue[Any],
        read: Callable[[Any], tuple[T, bool]],
    ):
        self._process, self._id, self._queue, self._read = process, job_id, queue, read
        self._over = self._cancelled = False

    def __aiter__(self) -> Replies[T]:
        return self

    async def __anext__(self) -> T:
        if self._over:
            raise StopAsyncIteration
        reply = await self._queue.get()
        try:
            if isinstance(reply, BaseException):
                raise reply
            value, last = self._read(reply)
        except BaseException:
            self._end()
            raise
        if last:
            self._end()
        return value

    def cancel(self) -> None:
        """Ask the process to stop this request at its next piece (once)."""
        if self._over or self._cancelled:
            return
        self._cancelled = True
        try:
            self._process._send(Cancel(self._id))
        except OmniError:  # the process is gone: the reader says so to the queue
            pass

    async def aclose(self) -> None:
        if not self._over:
            self.cancel()
            self._end()

    def _end(self) -> None:
        self._over = True
        self._process._pending.pop(self._id, None)


def settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any) -> None:
    """Set `future` (an exception where `value` is one) on its loop, from another thread."""

    def put() -> None:
        if future.done():
            return
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)

    try:
        loop.call_soon_threadsafe(put)
    except RuntimeError:  # that event loop is closed: nobody is left to read it
        pass
