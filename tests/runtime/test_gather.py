"""Jobs that trickle in while others decode are gathered into one prefill group (one forward
pass and one new batch shape for the group, not one for each job), for at most `gather_s`, and
only while they keep coming: the engine's scheduler driven step by step, tiny real model."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from omni.ports.jobs import Sampling
from omni.runtime.chat.observe import StepStats
from omni.runtime.chat.prefix_cache import PrefixCache
from omni.runtime.chat.scheduler import BatchScheduler
from omni.runtime.chat.state import PREFILL_GROUP
from omni.runtime.chat.wire import Close, Finished, Output, Request, Spec, Started, Token
from omni.runtime.chat.worker import CUDA_PREFILL_GROUP


class Script:
    """The scheduler's pipe. Step k's messages can be received once the scheduler has sent
    the outputs of k steps (however many times it looks in between); it keeps what each step
    sends back. Idle, waiting for work, the scheduler gets the next step's messages. It keeps
    a clock too, `now`, that moves `step_s` a step: `run` gives it to the scheduler, so what
    gathers with whom depends on steps alone, not on how fast the machine is."""

    def __init__(self, steps: list[list[Request]], step_s: float = 0.0):
        self.steps = [deque(s) for s in steps]
        self.step_s = step_s  # each step takes this long, on the clock
        self.now = 0.0
        self.sent: list[list[Output]] = []
        self.skipped = 0  # steps passed while the scheduler was idle

    def _now(self) -> deque[Request] | None:
        k = len(self.sent) + self.skipped
        return self.steps[k] if k < len(self.steps) else None

    def poll(self, timeout: float | None = None) -> bool:
        while timeout is None and (now := self._now()) is not None and not now:
            self.skipped += 1  # blocked: time passes until something comes
        now = self._now()
        if timeout and now is not None and not now:  # a wait with a bound: a step passes
            self.skipped += 1
            now = self._now()
        return now is None or bool(now)

    def recv(self) -> Request:
        now = self._now()
        return Close() if now is None else now.popleft()

    def send(self, outputs: list[Output]) -> None:
        self.sent.append(list(outputs))
        self.now += self.step_s

    def started_together(self) -> list[list[int]]:
        """The job ids started in each step that started any."""
        groups = [[o.id for o in out if isinstance(o, Started)] for out in self.sent]
        return [g for g in groups if g]


def job(i: int, tokens: int = 40, behind: int = 0) -> Spec:
    sampling = Sampling(temperature=0.0, max_tokens=tokens)
    return Spec(i, [1, 2, 3, 10 + i], [], "", sampling, None, behind)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> tuple[Any, Any]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer


def run(
    loaded: tuple[Any, Any],
    steps: list[list[Request]],
    gather_s: float,
    step_s: float = 0.0,
    group: int = PREFILL_GROUP,
) -> Script:
    model, tokenizer = loaded
    store = PrefixCache(model, 0, 0)
    scheduler = BatchScheduler(model, tokenizer, store, 32, gather_s, prefill_group=group)
    script = Script([*steps, *([[]] * 100), [Close()]], step_s)
    scheduler.clock = lambda: script.now
    scheduler.run(script)  # type: ignore[arg-type]
    return script


@pytest.mark.parametrize("group", [PREFILL_GROUP, CUDA_PREFILL_GROUP])
def test_a_trickle_is_prefilled_as_one_group(loaded: tuple[Any, Any], group: int) -> None:
    n = group + 2
    steps = [[job(i)] for i in range(n)]  # one job a step: the first runs alone at once
    gathered = run(loaded, steps, gather_s=60.0, group=group).started_together()
    assert gathered[0] == [0]
    # The next `group` jobs wait for one another; the rest form the next group.
    assert gathered[1] == list(range(1, group + 1))
    assert gathered[2] == [group + 1]
    # Not gathered, a job waits for no company: it fits in the group beside the job prefilled
    # just before it, so it starts in the step it came.
    script = run(loaded, steps, gather_s=0.0, group=group)
    started = {o.id: k for k, out in enumerate(script.sent) for o in out if isinstance(o, Started)}
    assert started == {i: i for i in range(n)}


def test_jobs_wait_only_while_others_keep_coming(loaded: tuple[Any, Any]) -> None:
    steps = [[job(0)], [job(1)], [job(2)], [], [], [job(3)], []]
    script = run(loaded, steps, gather_s=60.0)
    # 1 and 2 came in consecutive steps and start together at the first step that brings
    # nothing (3); 3 came alone at step 5 and starts at step 6.
    assert script.started_together() == [[0], [1, 2], [3]]
    starts = [i for i, out in enumerate(script.sent) if any(isinstance(o, Started) for o in out)]
    assert starts == [0, 3, 6]


def test_no_job_waits_longer_than_gather_s(loaded: tuple[Any, Any]) -> None:
    # A job a step, a step every 30 ms (the script's clock), at most 100 ms of waiting: groups
    # of two to four, never the full PREFILL_GROUP.
    steps = [[job(i)] for i in range(PREFILL_GROUP + 1)]
    script = run(loaded, steps, gather_s=0.1, step_s=0.03)
    groups = script.started_together()
    assert groups[0] == [0]
    assert all(1 < len(g) <= 4 for g in groups[1:-1]), groups
    assert sorted(i for g in groups for i in g) == list(range(PREFILL_GROUP + 1))
    # Job i came at step i: none started more than gather_s later.
    started = {o.id: k for k, out in enumerate(script.sent) for o in out if isinstance(o, Started)}
    assert all((started[i] - i) * 0.03 <= 0.1 for i in started), started


def test_where_a_step_outlasts_gather_s_nobody_waits(loaded: tuple[Any, Any]) -> None:
    steps = [[job(i)] for i in range(4)]
    groups = run(loaded, steps, gather_s=0.05, step_s=0.06).started_together()
    assert groups == [[0], [1], [2], [3]]


def test_gathered_jobs_decode_as_they_would_alone(loaded: tuple[Any, Any]) -> None:
    steps = [[job(i, tokens=12)] for i in range(4)]

    def tokens(script: Script) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for sent in script.sent:
            for o in sent:
                if isinstance(o, Token):
                    out.setdefault(o.id, []).append(o.token)
        return out

    gathered = tokens(run(loaded, steps, gather_s=60.0))
    alone = {i: tokens(run(loaded, [[job(i, tokens=12)]], gather_s=0.0))[i] for i in range(4)}
    assert gathered == alone


def test_prefill_steps_are_counted_by_time_when_asked(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    steps = [[job(0)], [job(1), job(2)], [], [job(3)]]
    counts = []
    for timed in (True, False):
        stats = StepStats(time_prefill=timed)
        scheduler = BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 32, 0.0, stats)
        scheduler.run(Script([*steps, *([[]] * 60), [Close()]]))  # type: ignore[arg-type]
        counts.append(dict(stats.stats))
    timed_stats, plain = counts
    # Jobs 1-3 were prefilled in the batch (job 0 alone, outside it), in two steps.
    assert timed_stats["prefill_steps"] == 2
    buckets = [v for k, v in timed_stats.items() if k.startswith("prefill_steps_under_")]
    assert sum(buckets) + timed_stats.get("prefill_slow_steps", 0) == 2
    assert 0 < timed_stats["prefill_max_s"] < timed_stats["step_s"]
    assert "prefill_steps" not in plain


def test_a_job_that_stops_keeps_its_end_token_in_the_prefix_cache(
    loaded: tuple[Any, Any],
) -> None:
    """Decoding alone, the end token was fed to the model before it was seen: the kept cache
    holds it, and is named with it (a follow-up turn's prompt carries it too). A job whose first
    token is the end took it from its prompt's pass: its cache holds the prompt."""
    model, tokenizer = loaded
    eos = sorted(tokenizer.eos_token_ids)[0]

    def ending(i: int) -> Spec:
        sampling = Sampling(temperature=0.0, max_tokens=8, logit_bias=((eos, 100.0),))
        return Spec(i, [1, 2, 3, 10 + i], [], "", sampling)

    # Job 0 alone (decoded on its own), then 1 and 2 together (in the batch).
    for steps, held in (([[ending(0)]], 1), ([[ending(1), ending(2)]], 0)):
        store = PrefixCache(model, 8, 1 << 30)
        scheduler = BatchScheduler(model, tokenizer, store, 8, 0.0)
        scheduler.run(Script([*steps, [], [], [Close()]]))  # type: ignore[arg-type]
        for prompt in (spec.prompt for spec in steps[0]):
            cache, rest = store.nearest("", [*prompt, eos, 77])
            assert (cache[0].offset, rest) == (len(prompt) + held, [eos, 77][held:])


def test_kept_caches_hold_only_their_own_memory(loaded: tuple[Any, Any]) -> None:
    """A cache cut out of the batch for the prefix cache must not keep the whole batch's
    buffer alive: once the batch is done, what stays held is what the prefix cache counts."""
    import gc

    import mlx.core as mx

    model, tokenizer = loaded
    store = PrefixCache(model, 16, 1 << 34)
    jobs = [
        Spec(i, [1, 2, 3, 10 + i] * 30, [], "", Sampling(temperature=0.0, max_tokens=200))
        for i in range(16)
    ]
    mx.synchronize()
    gc.collect()
    before = mx.get_active_memory()
    scheduler = BatchScheduler(model, tokenizer, store, 16, 0.0)
    scheduler.run(Script([jobs, *([[]] * 300), [Close()]]))  # type: ignore[arg-type]
    del scheduler
    mx.synchronize()
    gc.collect()
    held = mx.get_active_memory() - before
    assert len(store) == 16
    assert held < 1.3 * store.nbytes, (held, store.nbytes)


def prefill_passes(
    loaded: tuple[Any, Any],
    steps: list[list[Request]],
    store: PrefixCache,
    monkeypatch: pytest.MonkeyPatch,
    max_batch: int = 32,
    group: int = PREFILL_GROUP,
) -> tuple[list[int], Script]:
    """The prompts of each prefill pass the engine ran, and the pipe."""
    fed = counting_passes(monkeypatch)
    model, tokenizer = loaded
    scheduler = BatchScheduler(model, tokenizer, store, max_batch, 0.0, prefill_group=group)
    script = Script([*steps, *([[]] * 60), [Close()]])
    scheduler.run(script)  # type: ignore[arg-type]
    return [len(rows) for rows in fed], script


def counting_passes(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Each prefill pass from now on, as the token counts it fed its prompts: BatchGenerator's
    (PromptProcessingBatch.prompt) and the engine's own groups' (first_tokens.feed)."""
    from mlx_lm.generate import PromptProcessingBatch

    from omni.runtime.chat import first_tokens

    passes: list[list[int]] = []
    prompt, feed = PromptProcessingBatch.prompt, first_tokens.feed

    def counted(self: Any, tokens: list[list[int]]) -> None:
        if tokens:
            passes.append([len(t) for t in tokens])
        prompt(self, tokens)

    def fed(model: Any, rows: list[first_tokens.Row]) -> first_tokens.Fed:
        passes.append([len(r.rest) for r in rows])
        return feed(model, rows)

    monkeypatch.setattr(PromptProcessingBatch, "prompt", counted)
    monkeypatch.setattr(first_tokens, "feed", fed)
    return passes


@pytest.mark.parametrize("group", [PREFILL_GROUP, CUDA_PREFILL_GROUP])
def test_a_burst_is_prefilled_in_groups_of_the_engines_size(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, group: int
) -> None:
    """A burst of 64 (as a benchmark's round): 64 / group passes of `group` prompts, and every
    job's tokens. The first job, decoded alone since it came first, is fed its last tokens
    again with the first group (over its size: one more row in a pass costs next to nothing)."""
    n = 64
    steps = [[job(0)], [job(i) for i in range(1, n)]]
    store = PrefixCache(loaded[0], 0, 0)
    passes, script = prefill_passes(loaded, steps, store, monkeypatch, max_batch=n, group=group)
    assert passes == [group + 1] + [group] * (n // group - 2) + [group - 1]
    assert sum(isinstance(o, Token) for sent in script.sent for o in sent) == 40 * n


def test_a_prefill_group_holds_one_prompt_at_least(loaded: tuple[Any, Any]) -> None:
    """BatchGenerator would never start a prompt with a group of 0: jobs would hang."""
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="at least one prompt"):
        BatchScheduler(model, tokenizer, PrefixCache(model, 0, 0), 32, prefill_group=0)


def test_a_job_moving_out_of_the_solo_path_is_prefilled_with_its_group(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 0 runs alone; 15 more come at once. 16 jobs are two prefill groups: two passes, the
    moved job fed with the first. (Handed to BatchGenerator with one token, it went to decoding
    at once yet took a place in the first group: the other 7 were prefilled, then one more,
    then 7 ...: every group after it in two passes.)"""
    n = 2 * PREFILL_GROUP
    steps = [[job(0)], [], [job(i) for i in range(1, n)]]
    passes, script = prefill_passes(loaded, steps, PrefixCache(loaded[0], 0, 0), monkeypatch)
    assert passes == [PREFILL_GROUP + 1, PREFILL_GROUP - 1]
    assert sum(isinstance(o, Token) for sent in script.sent for o in sent) == 40 * n


def test_a_job_cached_but_for_its_last_token_is_prefilled_with_its_group(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt the prefix cache holds all but the last token of (the same prompt again) still
    hands the batch two tokens, so it is prefilled with its group rather than splitting it."""
    model = loaded[0]
    store = PrefixCache(model, 8, 1 << 30)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    first = Spec(100, prompt, [], "", Sampling(temperature=0.0, max_tokens=1))
    prefill_passes(loaded, [[first]], store, monkeypatch)
    assert store.nearest("", prompt)[0][0].offset == len(prompt) - 1  # all but the last one

    n = 2 * PREFILL_GROUP
    again = Spec(0, prompt, [], "", Sampling(temperature=0.0, max_tokens=4))
    other = [Spec(i, [200 + i, 11, 12, 13], [], "", again.sampling) for i in range(1, n)]
    jobs = [again, *other]  # the others share nothing with the cached prompt
    passes, script = prefill_passes(loaded, [jobs], store, monkeypatch)
    assert passes == [PREFILL_GROUP, PREFILL_GROUP]
    finished = {o.id: o for sent in script.sent for o in sent if isinstance(o, Finished)}
    assert finished[0].cached_tokens == len(prompt) - 2  # cached tokens: two are fed again


def test_jobs_joining_while_a_short_group_finishes_do_not_split_every_group_after(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 0 runs alone; 12 come, then 19 the next step. BatchGenerator filled a prefill group
    up to its size counting the group it had just prefilled, so 19 handed over while 5 were
    still in it were prefilled 3, then 5, 3, 5 ...: every group after in two passes (on an
    H200, one round in six at 64 streams took twice the prefill time). The engine's own
    groups are full ones, a group a step, whatever came when."""
    steps = [[job(0)], [job(i) for i in range(1, 13)], [job(i) for i in range(13, 32)]]
    passes, script = prefill_passes(loaded, steps, PrefixCache(loaded[0], 0, 0), monkeypatch)
    assert passes == [PREFILL_GROUP + 1, PREFILL_GROUP, PREFILL_GROUP, 7]
    assert sum(isinstance(o, Token) for sent in script.sent for o in sent) == 40 * 32


def test_jobs_that_fit_beside_a_finishing_group_join_it_at_once(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of 5 (job 0, decoded alone, and four more), 3, 5, 1, then 8: each fed in the step
    it came, whatever was fed the step before (BatchGenerator's own groups made the 8 wait a
    step for the 1 to move on: test_jobs_joining_while_a_short_group_finishes...)."""
    sizes = [1, 4, 3, 5, 1, 8]
    ids = iter(range(sum(sizes)))
    steps = [[job(next(ids)) for _ in range(n)] for n in sizes]
    passes, script = prefill_passes(loaded, steps, PrefixCache(loaded[0], 0, 0), monkeypatch)
    assert passes == [5, 3, 5, 1, PREFILL_GROUP]
    started = [o.id for out in script.sent for o in out if isinstance(o, Started)]
    by_step = [len([o for o in out if isinstance(o, Started)]) for out in script.sent[:6]]
    assert by_step == [1, 4, 3, 5, 1, 8]
    assert started == list(range(sum(sizes)))


@pytest.mark.parametrize("max_batch", [2, 3, PREFILL_GROUP])
def test_batches_no_bigger_than_a_group_never_hold_a_job_back(
    loaded: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, max_batch: int
) -> None:
    """With room for at most one group, a job handed over always fits in the group: each starts
    as soon as a place frees (short jobs, a job a step)."""
    steps = [[job(i, tokens=2)] for i in range(12)]
    sent = prefill_passes(
        loaded, steps, PrefixCache(loaded[0], 0, 0), monkeypatch, max_batch=max_batch
    )[1].sent
    started = {o.id: k for k, out in enumerate(sent) for o in out if isinstance(o, Started)}
    ended = {o.id: k for k, out in enumerate(sent) for o in out if isinstance(o, Finished)}
    for i in range(12):
        running = [j for j in range(i) if ended[j] >= i]  # still in the batch when i came
        if len(running) < max_batch:
            assert started[i] == i, (i, started, ended)


def test_an_idle_engine_waits_for_the_jobs_on_their_way(loaded: tuple[Any, Any]) -> None:
    # Three requests taken in at once: each job says how many are still behind it. The
    # first does not start alone: the three are prefilled together once the last is here.
    steps = [[job(0, behind=2)], [job(1, behind=1)], [], [job(2)], []]
    script = run(loaded, steps, gather_s=60.0)
    assert script.started_together() == [[0, 1, 2]]
    # Told of nobody behind it, a job starts alone at once; the others join it later.
    steps = [[job(0)], [job(1)], [job(2)]]
    assert run(loaded, steps, gather_s=60.0).started_together()[0] == [0]


def test_an_idle_engine_waits_for_a_group_at_most(loaded: tuple[Any, Any]) -> None:
    # Many on their way: a prefill group's worth starts together, the rest after.
    n = PREFILL_GROUP + 2
    steps = [[job(i, behind=n - 1 - i)] for i in range(n)]
    gathered = run(loaded, steps, gather_s=60.0).started_together()
    assert gathered[0] == list(range(PREFILL_GROUP))
    assert sorted(i for g in gathered[1:] for i in g) == [PREFILL_GROUP, PREFILL_GROUP + 1]


def test_an_idle_engine_waits_no_longer_than_gather_s(loaded: tuple[Any, Any]) -> None:
    # The job said one more was coming, and none came: it starts once gather_s has passed.
    steps = [[job(0, behind=1)], *([[]] * 5), [job(1)]]
    script = run(loaded, steps, gather_s=0.0)
    assert script.started_together()[0] == [0]
    script = run(loaded, steps, gather_s=60.0)  # waited for: 1 came, both start together
    assert script.started_together() == [[0, 1]]
