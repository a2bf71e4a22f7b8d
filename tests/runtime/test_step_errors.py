"""A generation that fails in the engine fails alone, and its message (which clients read, in
`response.failed` or a 500) never carries the exception's text: that goes to the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from omni.runtime.batching import GENERATION_FAILED, BatchScheduler
from omni.runtime.generation import PrefixCache
from omni.runtime.wire import Close, Failed
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
    [("_start_solo", 1), ("_solo_step", 1), ("_admit", 2), ("_step", 2)],  # one job runs solo
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
