"""The run plan: stored with the accepted request, and the one source a restart's recovery
builds a background run from (its sampling, grammar, namespace, tools and thinking)."""

from __future__ import annotations

import asyncio
import copy
import json
import time

from omni.events import MemoryStore
from omni.ports.chat import ToolFormat
from omni.ports.jobs import Delta, Finished, Sampling
from omni.protocol.recorder import ResponseRecorder
from omni.protocol.thinking import ThinkSplitter
from omni.schemas.responses import ResponseCreate
from omni.service.plan import RunPlan, stored_plan
from omni.service.streams import tokens_stream
from omni.tools.calls import CallSplitter

from .conftest import ScriptedEngine, serving

TOOL = {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}


def test_a_plan_survives_its_json() -> None:
    plan = RunPlan(
        Sampling(temperature=0.3, top_p=0.9, max_tokens=7, seed=4, logit_bias=((5, -1.5),)),
        ({"type": "function", "function": {"name": "add"}},),
        "required",
        False,
        True,
        {"type": "json_object"},
        "alice:k",
        session=True,
    )
    assert RunPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_a_request_accepted_before_plans_were_stored_derives_one_from_its_body() -> None:
    sampling = Sampling(temperature=0.5, max_tokens=9)
    old = {
        "body": {
            "tools": [TOOL, {"type": "web_search"}],  # hosted tools were never callable
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "reasoning": {"effort": "high"},
        },
        "sampling": json.loads(json.dumps(RunPlan(sampling).to_json()))["sampling"],
        "constraint": {"type": "json_object"},
        "cache_namespace": "bob:",
    }
    plan = stored_plan(ScriptedEngine(), old)
    assert plan.sampling == sampling
    assert [t["function"]["name"] for t in plan.tools] == ["add"]
    assert (plan.mode, plan.parallel, plan.constraint) == ("required", False, old["constraint"])
    assert plan.cache_namespace == "bob:"
    assert plan.thinking is None  # a plain model: effort is ignored


def test_a_resumed_recorder_carries_its_splitters_on_from_the_log() -> None:
    folded = {
        "id": "resp_x",
        "status": "in_progress",
        "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "add",
             "arguments": "{}", "status": "completed"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "status": "in_progress",
             "content": [{"type": "reasoning_text", "text": "hmm"}]},
        ],
    }  # fmt: skip
    calls = CallSplitter(ToolFormat(), [{"type": "function", "function": {"name": "add"}}], 1)
    think = ThinkSplitter("<think>", "</think>")
    recorder = ResponseRecorder.resume(folded, 7, calls, think)
    assert calls.calls == 1  # parallel_tool_calls false: no second call after the restart
    assert think.inside and think.feed("<think>") == [("reasoning", "<think>")]
    assert recorder.reasoning_text == "hmm"


async def _tokens(store: MemoryStore, rid: str, n: int) -> None:
    deadline = time.monotonic() + 30
    while sum(len(json.loads(r.data)) for r in await store.read(tokens_stream(rid))) < n:
        assert time.monotonic() < deadline, "the tokens were not recorded"
        await asyncio.sleep(0.01)


async def test_a_restart_continues_a_background_run_as_it_was_planned() -> None:
    store, first = MemoryStore(), ScriptedEngine()
    first.scripts.append([Delta("Hel", 10), Delta("lo", 11)])  # then the server "dies"
    body = ResponseCreate(
        input="hi",
        background=True,
        tools=[TOOL],
        parallel_tool_calls=False,
        temperature=0.3,
        top_p=0.9,
        max_output_tokens=20,
        prompt_cache_key="k",
        text={"format": {"type": "json_object"}},
    )
    async with serving(store, first) as served:
        rid = (await served.responses.create(body))["id"]
        await _tokens(store, rid, 2)
        crashed = copy.deepcopy(store)  # the log as a kill -9 leaves it: nothing ended
    second = ScriptedEngine()
    second.scripts.append([Delta(" there", 12), Finished("stop", 3, 3)])
    async with serving(crashed, second) as served:
        final = await served.responses.wait(rid)
        request, _ = await served.responses.accepted(rid)
    before, after = first.jobs[0], second.jobs[0]
    assert after.resume_tokens == [10, 11] and after.prompt == before.prompt
    assert after.sampling == before.sampling == RunPlan.from_json(request["plan"]).sampling
    assert (after.constraint, after.cache_namespace) == (before.constraint, before.cache_namespace)
    assert after.constraint is not None and before.cache_namespace.endswith("k")
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == "Hello there"


async def test_a_session_s_jobs_say_so_for_the_prefix_cache() -> None:
    """A chain's next turn, a history resent with its answers and a prompt_cache_key are a
    session's (their prefix cache is kept longer); a first turn alone is not."""
    engine = ScriptedEngine()
    async with serving(MemoryStore(), engine) as services:
        responses = services.responses

        async def turn(body: ResponseCreate) -> tuple[str, bool]:
            engine.scripts.append([Delta("ok", 5), Finished("stop", 3, 1)])
            rid = (await responses.create(body))["id"]
            await responses.wait(rid)
            return rid, engine.jobs[-1].session

        first, alone = await turn(ResponseCreate(input="hi"))
        _, chained = await turn(ResponseCreate(input="more", previous_response_id=first))
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
        _, resent = await turn(
            ResponseCreate(input=[*history, {"role": "user", "content": "more"}])
        )
        _, keyed = await turn(ResponseCreate(input="hi", prompt_cache_key="session-1"))
        assert (alone, chained, resent, keyed) == (False, True, True, True)
