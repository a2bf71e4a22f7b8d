"""A run plan: everything a create decides about how its generation runs (sampling, the tools
the model may call and how, thinking, the grammar, the prefix-cache namespace). It is stored in
the accepted-request event, and one function turns it into the run's parts, so a create and a
restart's recovery build the same run from the same facts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, get_args

from omni.ports.chat import Engine
from omni.ports.jobs import Job, Sampling
from omni.protocol.thinking import ThinkSplitter
from omni.service.reasoning import thinker, thinking_plan
from omni.tools.calls import CallSplitter
from omni.tools.policy import Mode, splitter, tool_policy

# Sampling's values are JSON already: asdict's deep copy of each was a third of to_json.
SAMPLING_FIELDS = dataclasses.fields(Sampling)


@dataclass(frozen=True, slots=True)
class RunPlan:
    sampling: Sampling
    tools: tuple[dict[str, Any], ...] = ()  # the function tools the model may call (chat shape)
    mode: Mode = "none"
    parallel: bool = True  # parallel_tool_calls
    thinking: bool | None = None  # the template's thinking switch (None: its default)
    constraint: dict[str, Any] | None = None  # the grammar the output follows
    cache_namespace: str = ""
    session: bool = False  # a multi-turn session's prompt: its prefix cache is kept longer

    def job(
        self,
        prompt: list[int],
        resume_tokens: list[int] | None = None,
        images: tuple[bytes, ...] = (),
    ) -> Job:
        return Job(
            prompt,
            self.sampling,
            resume_tokens=list(resume_tokens or []),
            cache_namespace=self.cache_namespace,
            constraint=self.constraint,
            images=images,
            session=self.session,
        )

    def splitter(self, engine: Engine) -> CallSplitter | None:
        """Reads the model's calls out of its text, when it may call a tool."""
        return splitter(engine.capabilities.tool_format, list(self.tools), self.mode, self.parallel)

    def thinker(self, engine: Engine, prompt: list[int]) -> ThinkSplitter | None:
        """Reads reasoning out of the text, for a reasoning model with thinking on."""
        return thinker(engine, prompt, self.thinking)

    def to_json(self) -> dict[str, Any]:
        return {
            "sampling": {f.name: getattr(self.sampling, f.name) for f in SAMPLING_FIELDS},
            "tools": list(self.tools),
            "mode": self.mode,
            "parallel": self.parallel,
            "thinking": self.thinking,
            "constraint": self.constraint,
            "cache_namespace": self.cache_namespace,
            "session": self.session,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunPlan:
        fields = dict(doc["sampling"])
        fields["logit_bias"] = tuple((int(t), float(b)) for t, b in fields.get("logit_bias", ()))
        mode = doc.get("mode", "none")
        if mode not in get_args(Mode):
            raise ValueError(f"unknown tool mode {mode!r}")
        return cls(
            sampling=Sampling(**fields),
            tools=tuple(doc.get("tools") or ()),
            mode=mode,
            parallel=bool(doc.get("parallel", True)),
            thinking=doc.get("thinking"),
            constraint=doc.get("constraint"),
            cache_namespace=str(doc.get("cache_namespace", "")),
            session=bool(doc.get("session", False)),
        )


def stored_plan(engine: Engine, request: dict[str, Any]) -> RunPlan:
    """The plan of an accepted response request. Requests accepted before plans were stored
    carry their sampling, grammar and namespace beside the body: the rest is derived from the
    body as the create of their time did."""
    if "plan" in request:
        return RunPlan.from_json(request["plan"])
    body = request["body"]
    functions = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    tools, mode = tool_policy(functions, body.get("tool_choice"))
    effort = (body.get("reasoning") or {}).get("effort")
    thinking, _ = thinking_plan(engine, effort, None)
    return RunPlan.from_json(
        {
            "sampling": request["sampling"],
            "tools": tools,
            "mode": mode,
            "parallel": body.get("parallel_tool_calls") is not False,
            "thinking": thinking,
            "constraint": request.get("constraint"),
            "cache_namespace": request.get("cache_namespace", ""),
        }
    )
