"""Reasoning out of generated text: what a model writes inside its think block (`<think>`…
`</think>`, the markers mlx-lm finds in the tokenizer) is reasoning, the rest is the answer.
Pure: text in, ("reasoning" | "text", str) segments out."""

from __future__ import annotations

from typing import Literal

from omni.tools.calls import partial_suffix

Part = tuple[Literal["reasoning", "text"], str]


class ThinkSplitter:
    """`inside`: the prompt already opened the think block (templates that start thinking
    for the model); otherwise a block may open at the very start of the output."""

    def __init__(self, start: str, end: str, inside: bool = False):
        self.start, self.end = start, end
        self.inside = inside
        self._opening = not inside  # only leading whitespace seen so far: a block may open
        self._held = ""
        self.closed = False
        self._answered = False

    def carry_on(self, inside: bool) -> None:
        """Carry on after output split before (a restart): no block opens at the start any
        more; `inside`: the block is still open."""
        self.inside, self._opening = inside, False

    def feed(self, text: str) -> list[Part]:
        self._held += text
        out: list[Part] = []
        while self._held:
            if self._opening:
                head = self._held.lstrip()
                if not head or (self.start.startswith(head) and head != self.start):
                    return out  # undecided: whitespace, or part of the opening marker
                self._opening = False
                if head.startswith(self.start):
                    self._held = head[len(self.start) :]
                    self.inside = True
                    continue
            if not self.inside:
                if self.closed and not self._answered:  # the blank lines after the block
                    self._held = self._held.lstrip("\n")
                    if not self._held:
                        return out
                    self._answered = True
                text, self._held = self._held, ""
                out.append(("text", text))
                return out
            at = self._held.find(self.end)
            if at < 0:
                keep = partial_suffix(self._held, self.end)
                released = self._held[: len(self._held) - keep]
                self._held = self._held[len(released) :]
                if released:
                    out.append(("reasoning", released))
                return out
            if at:
                out.append(("reasoning", self._held[:at]))
            self._held = self._held[at + len(self.end) :]
            self.inside = False
            self.closed = True
        return out

    def finish(self) -> list[Part]:
        held, self._held = self._held, ""
        if self.closed and not self._answered and not self.inside:
            held = held.lstrip("\n")
        if not held:
            return []
        return [("reasoning" if self.inside else "text", held)]
