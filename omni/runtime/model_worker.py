"""The model's side of a model process (omni.runtime.model_process): what every worker does as
it starts, loading its model and saying once whether it could, then serving until the server
closes it or goes away."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from omni import features
from omni.runtime.chat.inbox import Inbox
from omni.runtime.chat.wire import LoadFailed
from omni.runtime.platform.quiet import no_torch_advice

M = TypeVar("M")


def begin(**environ: str) -> None:
    """The process's first steps: it dies with the server; what the server preloaded (the
    BLAS, omni.runtime.platform) is in it since its start, so a process it starts must not
    look for it; `environ` where the environment leaves them unset; no PyTorch advice."""
    die_with_parent()
    os.environ.pop("LD_PRELOAD", None)
    for name, value in environ.items():
        os.environ.setdefault(name, value)
    no_torch_advice()


def serve_model(
    conn: Connection,
    feature: str | None,
    load: Callable[[], tuple[M, object]],
    serve: Callable[[M], None],
    **environ: str,
) -> None:
    """Begin, import the `feature`'s libraries (omni.features), `load()` the model and its
    Loaded message, send that (or LoadFailed, why it could not), then `serve(model)`."""
    begin(**environ)
    try:
        if feature is not None:
            features.feature(feature).load()
        model, loaded = load()
    except BaseException as exc:  # noqa: BLE001 - reported to the server as a value
        conn.send(LoadFailed(why(exc)))
        return
    conn.send(loaded)
    try:
        serve(model)
    except (EOFError, OSError):  # the server is gone: nobody is left to serve
        pass


def serve_in_turn(
    conn: Connection,
    closing: type,
    run: Callable[[Inbox, Any], None],
    failed: Callable[[int, str], object],
) -> None:
    """Requests one at a time, in order, until `closing` comes: `run(inbox, request)`; one
    that raises is answered `failed(id, why)`."""
    inbox = Inbox(conn, closing)
    while True:
        message = inbox.next()
        if isinstance(message, closing):
            return
        try:
            run(inbox, message)
        except Exception as exc:  # noqa: BLE001 - reported to the server as a value
            conn.send(failed(message.id, why(exc)))


def why(exc: BaseException) -> str:
    """An exception as the server is told it."""
    return f"{type(exc).__name__}: {exc}"


def die_with_parent() -> None:
    """If the server dies (even by kill -9), this process goes too, rather than finishing a
    long step for nobody. Linux only; elsewhere it notices at its next step."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)
