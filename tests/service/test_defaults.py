"""The sampling a request leaves out, on Responses, chat and legacy completions: the request's
own field, else the operator's flag (`omni serve --temp/--top-p`), else the model's recommended
sampling (its generation_config.json, on its Capabilities), else 1.0 / 1.0 and nothing else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from omni.ports.chat import RecommendedSampling
from omni.ports.jobs import Finished, Sampling
from omni.schemas.chat import ChatCompletionCreate, CompletionCreate
from omni.schemas.responses import ResponseCreate
from omni.service.defaults import Defaults

from .conftest import ScriptedEngine, Services

# What a model may recommend: every field of it.
ADVISED = RecommendedSampling(
    temperature=0.2, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1
)
FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
NO_FLAGS = Defaults()  # `omni serve` without --temp, --top-p, --max-tokens


async def _responses(services: Services, fields: dict[str, Any]) -> dict[str, Any]:
    created = await services.responses.create(ResponseCreate(input="hi", **fields))
    final = await services.responses.wait(created["id"])
    services.responses.release(created["id"])
    return final


async def _chat(services: Services, fields: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi"}]
    body = ChatCompletionCreate.model_validate({"messages": messages, **fields})
    cid, _ = await services.completions.create_chat(body)
    await services.completions.wait(cid)
    services.completions.release(cid)
    return {}


async def _text(services: Services, fields: dict[str, Any]) -> dict[str, Any]:
    cid = await services.completions.create_text(CompletionCreate(prompt="hi", **fields))
    await services.completions.wait(cid)
    services.completions.release(cid)
    return {}


Create = Callable[[Services, dict[str, Any]], Awaitable[dict[str, Any]]]
APIS = pytest.mark.parametrize(
    "create", [_responses, _chat, _text], ids=["responses", "chat", "text"]
)


async def _sampled(
    services: Services,
    create: Create,
    fields: dict[str, Any],
    model: RecommendedSampling = ADVISED,
    flags: Defaults = NO_FLAGS,
) -> tuple[Sampling, dict[str, Any]]:
    """The sampling the engine got for a request of `fields`, and the response (Responses)."""
    engine: ScriptedEngine = services.engine
    engine.capabilities = replace(ScriptedEngine.capabilities, sampling=model)
    services.responses.defaults = services.completions.defaults = flags
    engine.scripts.append([Finished("stop", 3, 0)])
    response = await create(services, fields)
    return engine.jobs[-1].sampling, response


def _picked(sampling: Sampling) -> tuple[Any, ...]:
    return tuple(getattr(sampling, name) for name in FIELDS)


@APIS
async def test_a_request_that_sets_none_gets_the_models_recommendation(
    services: Services, create: Create
) -> None:
    sampling, response = await _sampled(services, create, {})
    assert _picked(sampling) == (0.2, 0.9, 20, 0.05, 1.1)
    if response:  # the Response echoes what it was sampled with
        assert (response["temperature"], response["top_p"]) == (0.2, 0.9)


@APIS
async def test_an_operators_flag_wins_over_the_model(services: Services, create: Create) -> None:
    flags = Defaults(temperature=0.7, top_p=0.5)
    sampling, response = await _sampled(services, create, {}, flags=flags)
    assert _picked(sampling) == (0.7, 0.5, 20, 0.05, 1.1)  # what no flag sets: the model's
    if response:
        assert (response["temperature"], response["top_p"]) == (0.7, 0.5)
    sampling, _ = await _sampled(services, create, {}, flags=Defaults(top_p=0.5))
    assert (sampling.temperature, sampling.top_p) == (0.2, 0.5)


@APIS
async def test_what_a_request_sets_wins_over_flag_and_model(
    services: Services, create: Create
) -> None:
    asked = {"temperature": 1.3, "top_p": 0.8, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    flags = Defaults(temperature=0.7, top_p=0.5)
    sampling, response = await _sampled(services, create, asked, flags=flags)
    assert _picked(sampling) == (1.3, 0.8, 0, 0.0, 1.0)  # a 0 asked is not "left out"
    if response:
        assert (response["temperature"], response["top_p"]) == (1.3, 0.8)
    sampling, _ = await _sampled(services, create, {"temperature": 0}, flags=flags)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.0, 0.5, 20)


@APIS
async def test_a_model_that_recommends_nothing_samples_as_its_logits_say(
    services: Services, create: Create
) -> None:
    sampling, response = await _sampled(services, create, {}, model=RecommendedSampling())
    assert _picked(sampling) == (1.0, 1.0, 0, 0.0, None)
    if response:
        assert (response["temperature"], response["top_p"]) == (1.0, 1.0)
    greedy = RecommendedSampling(temperature=0.0)  # do_sample: false
    sampling, _ = await _sampled(services, create, {}, model=greedy)
    assert _picked(sampling) == (0.0, 1.0, 0, 0.0, None)


async def test_no_cap_asked_runs_to_the_end_of_the_context(services: Services) -> None:
    """No max_output_tokens / max_tokens and no --max-tokens: what the context leaves (1,024
    here, less the prompt's 3); the operator's cap where given; legacy completions: 16."""
    sampling, _ = await _sampled(services, _responses, {})
    assert sampling.max_tokens == 1024 - 3
    sampling, _ = await _sampled(services, _chat, {})
    assert sampling.max_tokens == 1024 - 3
    sampling, _ = await _sampled(services, _chat, {}, flags=Defaults(max_tokens=512))
    assert sampling.max_tokens == 512
    sampling, _ = await _sampled(services, _text, {})
    assert sampling.max_tokens == 16  # OpenAI's legacy default, whatever the flags
