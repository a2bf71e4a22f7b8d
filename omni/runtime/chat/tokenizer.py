"""What the chat engine reads from its model's tokenizer (mlx-lm's TokenizerWrapper) in the
server process: prompts rendered through the chat template, the think block's markers, how the
model writes tool calls, and the most bytes one token stands for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni.ports.chat import ToolFormat

SLOW_TOKENIZER_TOKEN_BYTES = 256


def load(path: str, eos: Any) -> Any:
    """mlx-lm's tokenizer of the model at `path` (`eos`: its end tokens, as its config says)."""
    from mlx_lm.utils import load_tokenizer

    load_it: Callable[..., Any] = load_tokenizer  # unannotated
    return load_it(path, eos_token_ids=eos)


def longest_token(tokenizer: Any) -> int:
    """The most UTF-8 bytes any one token decodes to (special tokens included): no text
    of n bytes is fewer than n / this many tokens."""
    hf = getattr(tokenizer._tokenizer, "backend_tokenizer", None)
    if hf is None:  # a slow tokenizer: not measured, a generous guess
        return SLOW_TOKENIZER_TOKEN_BYTES
    size = hf.get_vocab_size(with_added_tokens=True)
    texts = hf.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    return max(1, *(len(t.encode()) for t in texts))


def render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    extra: dict[str, Any],
) -> list[int]:
    """Prompt tokens: `messages` and `tools` through the chat template (`extra`: its
    keyword arguments), ready for the assistant's turn."""
    tokens = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=True, tokenize=True, **extra
    )
    # transformers 5 may hand back a BatchEncoding; mlx-lm wants a flat list of ids.
    if isinstance(tokens, dict) or hasattr(tokens, "input_ids"):
        tokens = tokens["input_ids"]
    return list(tokens)


def thinking(tokenizer: Any) -> tuple[str, str] | None:
    """The think block's markers, for a reasoning model (found by mlx-lm)."""
    if tokenizer is None or not tokenizer.has_thinking:
        return None
    return str(tokenizer.think_start), str(tokenizer.think_end)


def renders_tools(tokenizer: Any) -> bool:
    """The chat template renders tools (and tool calls and results) itself."""
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and "tools" in template


def tool_format(tokenizer: Any) -> ToolFormat:
    """How this model writes calls: mlx-lm's markers and parser for its family, or plain
    JSON when mlx-lm knows none."""
    tok = tokenizer
    if tok is None or not tok.has_tool_calling:
        return ToolFormat()
    family = str(getattr(tok.tool_parser, "__module__", "")).rsplit(".", 1)[-1]
    template = getattr(tok, "chat_template", None) or ""
    if family == "mistral" and "[ARGS]" not in template:
        family = "mistral_v03"  # one JSON list of calls, not NAME[ARGS]{...}
    return ToolFormat(tok.tool_call_start, tok.tool_call_end, tok.tool_parser, family)


def segments(tokenizer: Any, tokens: list[int]) -> list[str]:
    """Each token's text as a stream delivers it (a streaming detokenizer's segments)."""
    detokenizer = tokenizer.detokenizer
    out = []
    for token in tokens:
        detokenizer.add_token(token)
        out.append(detokenizer.last_segment)
    return out
