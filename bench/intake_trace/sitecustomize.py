"""Where a burst of requests goes inside `omni serve`: with this folder on PYTHONPATH (e.g.
BENCH_OMNI_ENV=PYTHONPATH=bench/intake_trace,INTAKE_TRACE=out.json), each request's way from
the ASGI call to the engine's submit is marked with the event loop thread's CPU time, and written
to $INTAKE_TRACE when the server exits. INTAKE_INLINE=1 renders prompts on the loop, not on the
prompter's thread; INTAKE_SWITCH_MS sets the interpreter's switch interval; INTAKE_ROOT names
the checkout to import Omni from (default: this one); INTAKE_PROFILE=FILE writes a cProfile
(CPU time) of the event loop thread while any request is on its way from the ASGI call to its
submit's return. Analysed by bench/intake_trace/report.py and bench/intake.py."""

from __future__ import annotations

import os
import sys

if os.environ.get("INTAKE_TRACE") and not os.environ.get("INTAKE_TRACE_DONE"):
    os.environ["INTAKE_TRACE_DONE"] = "1"  # the engine process it starts is not traced
    import atexit
    import contextvars
    import itertools
    import json
    import time

    MARKS: list[tuple[float, float, str, int]] = []
    _req: contextvars.ContextVar[int] = contextvars.ContextVar("intake_req", default=-1)
    _ids = itertools.count()
    TAKING: set[int] = set()  # requests between their ASGI call and their submit

    def mark(label: str) -> None:
        MARKS.append((time.perf_counter(), time.thread_time(), label, _req.get()))

    # At start-up the working directory is not on sys.path yet: the checkout's root is.
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.environ.get("INTAKE_ROOT") or here)
    if os.environ.get("INTAKE_SWITCH_MS"):
        sys.setswitchinterval(float(os.environ["INTAKE_SWITCH_MS"]) / 1000)

    import omni.api.app as app_module
    import omni.api.chat as chat_module
    import omni.runtime.chat.engine as engine_module
    import omni.service.prompting as prompting

    omni_dir = os.path.dirname(os.path.dirname(os.path.abspath(app_module.__file__)))
    mark("omni " + os.path.dirname(omni_dir))  # the checkout it serves
    make_app = app_module.create_app
    profile = None
    if os.environ.get("INTAKE_PROFILE"):
        import cProfile

        profile = cProfile.Profile(time.thread_time)  # CPU, not the GIL waits of other threads

    def create_app(*args, **kwargs):  # type: ignore[no-untyped-def]
        app = make_app(*args, **kwargs)
        inner = app.asgi_app

        async def asgi(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http" and scope["path"].endswith("/completions"):
                _req.set(next(_ids))
                if profile is not None and not TAKING:
                    profile.enable()
                TAKING.add(_req.get())
                mark("asgi")
            await inner(scope, receive, send)

        app.asgi_app = asgi  # type: ignore[method-assign]
        return app

    app_module.create_app = create_app
    parse = chat_module.parse_body

    def parse_body(*args, **kwargs):  # type: ignore[no-untyped-def]
        mark("parse")
        return parse(*args, **kwargs)

    chat_module.parse_body = parse_body
    run = prompting.Prompter.run

    async def prompter_run(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        mark("render>")
        try:
            if os.environ.get("INTAKE_INLINE"):
                return fn(*args, **kwargs)
            return await run(self, fn, *args, **kwargs)
        finally:
            mark("render<")

    prompting.Prompter.run = prompter_run  # type: ignore[method-assign]
    submit = engine_module.MLXEngine.submit

    def engine_submit(self, job):  # type: ignore[no-untyped-def]
        mark("submit")
        try:
            return submit(self, job)
        finally:
            mark("submitted")  # the job is in the engine's pipe
            TAKING.discard(_req.get())
            if profile is not None and not TAKING:
                profile.disable()

    engine_module.MLXEngine.submit = engine_submit  # type: ignore[method-assign]

    @atexit.register
    def _dump() -> None:
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.environ["INTAKE_PROFILE"])
        if MARKS:
            with open(os.environ["INTAKE_TRACE"], "w") as f:
                json.dump(MARKS, f)

    hard_exit = os._exit

    def _exit(code: int) -> None:  # omni serve ends with os._exit, past atexit
        _dump()
        hard_exit(code)

    os._exit = _exit
