"""A generation that fails in the engine fails alone, and its message (which clients read, in
`response.failed` or a 500) never carries the exception's text: that goes to the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from omni.runtime.chat.prefix_cache import PrefixCache
from omni.runtime.chat.scheduler import BatchScheduler
from omni.runtime.chat.state import GENERATION_FAILED, RanksOutOfStep
from omni.runtime.chat.wire import Close, Failed
from tests.runtime.test_gather import Script, job

SECRET = "sqlite3.OperationalError: /home/someone/private/path"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> tuple[Any, Any]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer


def boom(*_: Any) -> None:
    raise RuntimeError(SECRET)


@pytest.mark.parametrize(
    ("where", "jobs"),
    [("_start_solo", 1), ("_solo_step", 1), ("_step", 2)],  # one job runs solo
)
def test_a_failed_generation_says_so_without_the_exception(
    loaded: tuple[Any, Any], where: str, jobs: int, caplog: pytest.LogCaptureFixture
) -> None:
    model, tokenizer = loaded
    scheduler = BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 4, 0.0)
    setattr(scheduler, where, boom)  # starting the job, or a decode step, raises
    script = Script([[job(i, tokens=4) for i in range(jobs)], *([[]] * 5), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    failed = sorted(
        (o for out in script.sent for o in out if isinstance(o, Failed)), key=lambda o: o.id
    )
    assert failed == [Failed(i, GENERATION_FAILED) for i in range(jobs)]
    assert SECRET not in GENERATION_FAILED
    assert SECRET in caplog.text  # the operator still reads what happened


@pytest.mark.parametrize("where", ["feed", "join"])
def test_a_failed_group_pass_fails_its_jobs_without_the_exception(
    loaded: tuple[Any, Any],
    where: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pass that feeds a group its prompts (or its joining the batch) raises: the group's
    jobs fail, the engine goes on with the next job."""
    from omni.runtime.chat import first_tokens
    from omni.runtime.chat.wire import Token

    model, tokenizer = loaded
    scheduler = BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 4, 0.0)
    real = getattr(first_tokens, where)
    calls = 0

    def once(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            boom()
        return real(*args)

    monkeypatch.setattr(first_tokens, where, once)
    steps = [[job(0, tokens=4), job(1, tokens=4)], [], [job(2, tokens=4), job(3, tokens=4)]]
    script = Script([*steps, *([[]] * 8), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    sent = [o for out in script.sent for o in out]
    assert sorted(o.id for o in sent if isinstance(o, Failed)) == [0, 1]
    assert all(o.message == GENERATION_FAILED for o in sent if isinstance(o, Failed))
    assert {o.id for o in sent if isinstance(o, Token)} >= {2, 3}
    assert SECRET in caplog.text


@pytest.mark.parametrize("where", ["_solo_step", "_step"])
def test_a_sharded_models_failed_step_ends_its_ranks(loaded: tuple[Any, Any], where: str) -> None:
    """On a rank of a sharded model, a step that fails (a lost link fails one rank's
    collective, not the others') cannot fail its jobs and go on: the ranks would be out of
    step. The scheduler stops with RanksOutOfStep (the rank's process then exits)."""
    model, tokenizer = loaded
    scheduler = BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 4, 0.0)
    scheduler.sharded = True
    setattr(scheduler, where, boom)
    jobs = 2 if where == "_step" else 1
    script = Script([[job(i, tokens=4) for i in range(jobs)], *([[]] * 5), [Close()]])
    with pytest.raises(RanksOutOfStep):
        scheduler.run(script)  # type: ignore[arg-type]
    assert not any(isinstance(o, Failed) for out in script.sent for o in out)
