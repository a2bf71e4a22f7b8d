"""Which tools a request lets the model call, and how calls are read out of its text, given
how the model writes calls (its ToolFormat)."""

from __future__ import annotations

from typing import Any, Literal

from omni.errors import InvalidRequest
from omni.ports.chat import ToolFormat
from omni.tools.calls import CallSplitter, chat_tools
from omni.tools.families import family_tools

Mode = Literal["none", "auto", "required"]


def tool_policy(
    tools: list[dict[str, Any]], choice: str | dict[str, Any] | None, param: str = "tool_choice"
) -> tuple[list[dict[str, Any]], Mode]:
    """The function tools (chat shape) the model may call, and whether it may, must or must
    not call one. `choice` is either API's tool_choice: a mode, a named function
    (Responses' flat or Chat's nested shape) or `allowed_tools`."""
    nested = chat_tools(tools)
    if choice is None:
        return nested, "auto" if nested else "none"
    if isinstance(choice, str):
        if choice == "required" and not nested:
            raise InvalidRequest(
                "tool_choice 'required' needs at least one function tool.", param=param
            )
        return nested, choice  # type: ignore[return-value]
    kind = choice.get("type")
    if kind == "function":
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        chosen = [t for t in nested if t["function"]["name"] == name]
        if not chosen:
            raise InvalidRequest(
                f"tool_choice names {name!r}, which is not in `tools`.", param=param
            )
        return chosen, "required"
    if kind == "allowed_tools":
        spec = choice.get("allowed_tools", choice)  # Chat nests it, Responses does not
        allowed = {
            t.get("name") or (t.get("function") or {}).get("name") for t in spec.get("tools", [])
        }
        mode = spec.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequest("allowed_tools mode must be 'auto' or 'required'.", param=param)
        chosen = [t for t in nested if t["function"]["name"] in allowed]
        if not chosen:
            raise InvalidRequest("allowed_tools names none of the function tools.", param=param)
        return chosen, mode
    raise InvalidRequest(
        f"Unsupported tool_choice type {kind!r}: use 'none', 'auto', 'required', a function "
        "or allowed_tools.",
        param=param,
    )


def splitter(
    fmt: ToolFormat, tools: list[dict[str, Any]], mode: Mode, parallel: bool | None = True
) -> CallSplitter | None:
    """Reads calls out of the generated text, when the model may call a tool. A call that
    must be made is forced by a grammar (omni.tools.schema) in the model's own format
    where one can be written, else as plain JSON, and read in that format. Without
    `parallel` (parallel_tool_calls false) only the first call is made."""
    if mode == "none" or not tools:
        return None
    if mode == "required" and json_markers(fmt) is None and own_format(fmt, tools) is None:
        fmt = ToolFormat()  # the grammar forces plain JSON
    max_calls = None if parallel is not False else 1
    return CallSplitter(fmt, tools, max_calls, forced=mode == "required")


def plain_calls(fmt: ToolFormat) -> bool:
    """The model writes calls as plain JSON (mlx-lm knows no call format for it)."""
    return not (fmt.start and fmt.parser)


def own_format(fmt: ToolFormat, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The model's own call format as a grammar can write it, for a family whose calls are
    not JSON between markers (Qwen3-Coder, GLM, MiniMax, Kimi, Mistral, LFM2): the family
    and the tools, or None (no such family, or a parameter its format cannot carry)."""
    if fmt.family is None:
        return None
    listed = family_tools(fmt.family, tools)
    if listed is None:
        return None
    return {"type": "family_call", "family": fmt.family, "tools": listed}


def json_markers(fmt: ToolFormat) -> tuple[str, str] | None:
    """The markers of the model's own call format when its calls are JSON between them
    (Hermes, Qwen 2.5 and 3, ...): a grammar can then force or check calls in that format."""
    if fmt.start and fmt.end and fmt.family == "json_tools":
        return fmt.start, fmt.end
    return None
