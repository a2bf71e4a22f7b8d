"""What an engine answers of its model's text, from the tokenizer loaded in the server: the
chat template's prompt, the capabilities a request is planned by (tools, their format, the
think block, the context), raw text's tokens and a stream's segments. MLXEngine has it."""

from __future__ import annotations

from typing import Any

from omni.ports.chat import Capabilities, Messages, RecommendedSampling, ToolFormat, Tools
from omni.runtime.chat import tokenizer


class ModelText:
    """The model's text side, once its tokenizer is loaded (`_tokenizer`)."""

    _tokenizer: Any
    _capabilities: tuple[tuple[Any, ...], Capabilities] | None
    template_args: dict[str, Any]  # for every chat-template render
    context_length: int
    max_token_bytes: int  # the most bytes one token stands for
    sampling: RecommendedSampling  # its generation_config.json's

    def render(self, messages: Messages, tools: Tools, thinking: bool | None = None) -> list[int]:
        """`thinking`: switch a reasoning template's thinking on or off (its own kwarg, e.g.
        enable_thinking, as mlx-lm names it); None leaves the template's default (or what
        `template_args` set)."""
        extra = dict(self.template_args)
        if thinking is not None:
            extra["enable_thinking"] = thinking
        return tokenizer.render(self._tokenizer, messages, tools, extra)

    @property
    def capabilities(self) -> Capabilities:
        """What the loaded model can do, in one value. Read several times a request: built
        again only once what it is made of changed (the tokenizer, the context, at load)."""
        made_of = (self._tokenizer, self.context_length, self.max_token_bytes, self.sampling)
        if self._capabilities is None or self._capabilities[0] != made_of:
            value = Capabilities(
                self.context_length,
                self.max_token_bytes,
                self.supports_tools,
                self.tool_format,
                self.thinking,
                sampling=self.sampling,
            )
            self._capabilities = (made_of, value)
        return self._capabilities[1]

    @property
    def thinking(self) -> tuple[str, str] | None:
        """The think block's markers, for a reasoning model (found by mlx-lm)."""
        return tokenizer.thinking(self._tokenizer)

    def opens_thinking(self, prompt: list[int]) -> bool:
        """The template opened the think block at the end of the prompt."""
        marks = self.thinking
        return marks is not None and self._tokenizer.decode(prompt[-8:]).rstrip().endswith(marks[0])

    @property
    def supports_tools(self) -> bool:
        """The chat template renders tools (and tool calls and results) itself."""
        return tokenizer.renders_tools(self._tokenizer)

    @property
    def tool_format(self) -> ToolFormat:
        """How this model writes calls: mlx-lm's markers and parser for its family, or plain
        JSON when mlx-lm knows none."""
        return tokenizer.tool_format(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        """Prompt tokens for raw text (legacy completions): no chat template."""
        return list(self._tokenizer.encode(text))

    def segments(self, tokens: list[int]) -> list[str]:
        """Each token's text as a stream delivers it (a streaming detokenizer's segments)."""
        return tokenizer.segments(self._tokenizer, tokens)
