"""The engine's reader hands a big batch's tokens to the event loop a few steps at a time (the
loop's work for a stream paid once for several tokens), never later than HOLD_S after they
came, and a job's start, first token and end at once: the reader driven by a scripted pipe on
a scripted clock."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pytest

from omni.ports.jobs import Delta, Finished, Job, Sampling, Started
from omni.runtime.chat import engine as chat_engine
from omni.runtime.chat import wire
from omni.runtime.chat.delivery import HOLD_MIN, HOLD_S, Pending
from omni.runtime.chat.engine import MLXEngine


class Pipe:
    """The engine's end of the pipe: each step's outputs come at a given time. The reader's
    clock is this one: it moves to a step's time when the reader takes it, and by the
    timeout when the reader waits in vain."""

    def __init__(self, steps: list[tuple[float, list[wire.Output]]]):
        self.steps = deque(steps)
        self.now = 0.0

    def poll(self, timeout: float | None = None) -> bool:
        if self.steps and timeout is not None and self.steps[0][0] > self.now + timeout:
            self.now += timeout
            return False
        return True  # a step is there in time (or the pipe's end: recv says so)

    def recv(self) -> list[wire.Output]:
        if not self.steps:
            raise EOFError
        at, outputs = self.steps.popleft()
        self.now = max(self.now, at)
        return outputs


class Loop:
    """Where the reader hands outputs over: when (on the pipe's clock) and what."""

    def __init__(self, pipe: Pipe):
        self.pipe = pipe
        self.handoffs: list[tuple[float, list[tuple[int, Any]]]] = []

    def call_soon_threadsafe(self, put: Any) -> None:
        self.handoffs.append((self.pipe.now, []))
        put()


class Outputs:
    def __init__(self, job_id: int, loop: Loop):
        self.job_id, self.loop = job_id, loop

    def put_nowait(self, out: Any) -> None:
        self.loop.handoffs[-1][1].append((self.job_id, out))


class Detokenizer:
    silent: frozenset[int] = frozenset()  # tokens that complete no text (half a character)
    last_segment = "x"

    def add_token(self, token: int) -> None:
        self.last_segment = "" if token in self.silent else "x"

    def finalize(self) -> None:
        self.last_segment = ""


def read(
    steps: list[tuple[float, list[wire.Output]]],
    jobs: int,
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[float, list[tuple[int, Any]]]]:
    pipe = Pipe(steps)
    loop = Loop(pipe)
    monkeypatch.setattr(chat_engine.time, "perf_counter", lambda: pipe.now)
    engine = MLXEngine.__new__(MLXEngine)
    engine._conn = pipe  # type: ignore[assignment]
    engine._process = None
    engine._gone = "done"
    engine._generations = 0
    engine._pending = {}
    engine._rank_timeout_s, engine._crashed = None, False  # not sharded; its process there
    for i in range(jobs):
        job = Job(prompt=[1], sampling=Sampling())
        job.outputs = Outputs(i, loop)  # type: ignore[assignment]
        engine._pending[i] = Pending(job, loop, Detokenizer())  # type: ignore[arg-type]
    engine._read()
    return loop.handoffs


def batch(jobs: range, steps: int, every: float, start: float = 0.0) -> list[Any]:
    """Jobs that start together, each with a token a step, and end at the last step."""
    out = []
    for k in range(steps):
        outputs: list[wire.Output] = []
        for j in jobs:
            if k == 0:
                outputs.append(wire.Started(j, True))
            outputs.append(wire.Token(j, 100 + k))
            if k == steps - 1:
                outputs.append(wire.Finished(j, "length", 1, steps))
        out.append((start + k * every, outputs))
    return out


def came(steps: list[tuple[float, list[wire.Output]]]) -> dict[tuple[int, int], float]:
    """When each (job, token) came from the engine."""
    return {
        (o.id, o.token): at for at, outputs in steps for o in outputs if isinstance(o, wire.Token)
    }


def check_complete(handoffs: list[Any], jobs: range, steps: int) -> None:
    """Every job got all its outputs, in order: started, its tokens, its end."""
    for j in jobs:
        mine = [out for _, items in handoffs for job, out in items if job == j]
        assert isinstance(mine[0], Started)
        assert [d.token for d in mine[1:-1]] == [100 + k for k in range(steps)]
        assert isinstance(mine[-1], Finished)


def test_a_big_batch_goes_a_few_steps_at_a_time_and_never_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = range(2 * HOLD_MIN)
    steps = batch(jobs, 40, every=HOLD_S / 3)
    handoffs = read(steps, len(jobs), monkeypatch)
    check_complete(handoffs, jobs, 40)
    assert len(handoffs) <= 40 / 2  # at least two steps a hand-off, on average
    arrived = came(steps)
    for at, items in handoffs:
        for job, out in items:
            if isinstance(out, Delta) and out.token is not None:
                assert at - arrived[job, out.token] <= HOLD_S + 1e-9
    # The first step (starts, first tokens) and the last (ends) go the moment they come.
    assert handoffs[0][0] == steps[0][0]
    assert handoffs[-1][0] == steps[-1][0]


def test_a_job_joining_a_held_batch_gets_its_first_token_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    every = HOLD_S / 4
    steps = batch(range(HOLD_MIN), 20, every)
    late = HOLD_MIN
    joined = batch(range(late, late + 1), 8, every, start=5 * every)
    for k, (_, outputs) in enumerate(joined):
        steps[5 + k][1].extend(outputs)
    handoffs = read(steps, HOLD_MIN + 1, monkeypatch)
    check_complete(handoffs, range(HOLD_MIN), 20)
    check_complete(handoffs, range(late, late + 1), 8)
    mine = [(at, out) for at, items in handoffs for job, out in items if job == late]
    assert next(at for at, out in mine if isinstance(out, Delta)) == steps[5][0]
    assert next(at for at, out in mine if isinstance(out, Finished)) == steps[12][0]
    # Only its own outputs went early: the others' tokens of that step wait on.
    early = next(items for at, items in handoffs if at == steps[5][0])
    assert {job for job, _ in early} == {late}


def test_tokens_go_at_once_until_the_first_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first token that completes no text (half a character) is not the first text the
    client sees: the job's tokens go at once until one that does."""
    monkeypatch.setattr(Detokenizer, "silent", frozenset({100, 101}))
    every = HOLD_S / 4
    steps = batch(range(HOLD_MIN), 12, every)
    handoffs = read(steps, HOLD_MIN, monkeypatch)
    check_complete(handoffs, range(HOLD_MIN), 12)
    # Steps 0, 1 (silent) and 2 (the first text) go the moment they come; step 3 waits.
    assert [at for at, _ in handoffs[:3]] == [steps[k][0] for k in range(3)]
    assert handoffs[3][0] > steps[3][0]


@pytest.mark.parametrize(
    ("jobs", "every"),
    [(HOLD_MIN - 1, HOLD_S / 4), (2 * HOLD_MIN, HOLD_S * 1.5)],
    ids=["small batch", "slow steps"],
)
def test_small_batches_and_slow_steps_go_every_step(
    monkeypatch: pytest.MonkeyPatch, jobs: int, every: float
) -> None:
    steps = batch(range(jobs), 12, every)
    handoffs = read(steps, jobs, monkeypatch)
    assert [at for at, _ in handoffs] == [at for at, _ in steps]
    check_complete(handoffs, range(jobs), 12)


def churn(rng: random.Random, jobs: int) -> list[tuple[float, list[wire.Output]]]:
    """A batch kept big while jobs come and go (ended, stopped, cancelled, failed) on uneven
    step times; the pipe ends with some still running."""
    at, steps, running, joined = 0.0, [], {}, 0
    for _ in range(rng.randint(5, 80)):
        outputs: list[wire.Output] = []
        while joined < jobs and (len(running) < HOLD_MIN or rng.random() < 0.2):
            outputs.append(wire.Started(joined, True))
            running[joined], joined = 0, joined + 1
            if rng.random() < 0.3:
                break
        for j in list(running):
            outputs.append(wire.Token(j, 100 + running[j]))
            running[j] += 1
            if (r := rng.random()) < 0.05:
                reason = rng.choice(["length", "stop", "cancelled"])
                outputs.append(wire.Finished(j, reason, 1, running.pop(j)))
            elif r < 0.06:
                outputs.append(wire.Failed(j, "boom"))
                del running[j]
        at += rng.choice([0.0, 0.1, 0.3, 0.5, 0.9, 2.0]) * HOLD_S
        steps.append((at, outputs))
    return steps


@pytest.mark.parametrize("seed", range(200))
def test_jobs_coming_and_going_get_all_in_order_and_in_time(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Each job gets exactly what the engine sent for it, in order (and the engine-gone
    failure if the pipe ended first); its start, first token and end the moment they came,
    every other token within HOLD_S."""
    rng = random.Random(seed)
    jobs = rng.randint(1, 60)
    steps = churn(rng, jobs)
    handoffs = read(steps, jobs, monkeypatch)
    sent: dict[int, list[tuple[float, str, Any]]] = {j: [] for j in range(jobs)}
    for at, outputs in steps:
        for o in outputs:
            token = o.token if isinstance(o, wire.Token) else None
            sent[o.id].append((at, type(o).__name__.lower(), token))
    for j in range(jobs):
        got = [
            (at, type(out).__name__.lower(), getattr(out, "token", None))
            for at, items in handoffs
            for job, out in items
            if job == j and not (isinstance(out, Delta) and out.token is None)  # end's text
        ]
        got = [(at, "token" if kind == "delta" else kind, token) for at, kind, token in got]
        want = [(kind, token) for _, kind, token in sent[j]]
        if not want or want[-1][0] not in ("finished", "failed"):
            want.append(("failed", None))  # the pipe ended: the engine is gone
        assert [(kind, token) for _, kind, token in got] == want, j
        first = True
        for (came_at, kind, _), (at, _, _) in zip(
            sent[j], got, strict=False
        ):  # + the pipe-end failure
            assert at - came_at <= HOLD_S + 1e-9, (j, kind)
            if kind != "token" or first:
                assert at == came_at, (j, kind)
            first = first and kind != "token"
