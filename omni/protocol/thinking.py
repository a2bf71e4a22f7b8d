"""Reasoning out of generated text: what a model writes inside its think block (`<think>`…
`</think>`, the markers mlx-lm finds in the tokenizer) is reasoning, the rest is the answer.
Pure: text in, ("reasoning" | "text", str) segments out."""

from __future__ import annotations

from typing import Literal

from omni.tools.calls import held_back

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
            if self._opening and not self._open():
                break  # undecided: whitespace, or part of the opening marker
            if not self.inside:
                out += self._answer()
                break
            if not self._reason(out):
                break
        return out

    def _open(self) -> bool:
        """Past the leading whitespace, whether the output opens a block (then it is inside
        it); False while undecided."""
        head = self._held.lstrip()
        if not head or (self.start.startswith(head) and head != self.start):
            return False
        self._opening = False
        if head.startswith(self.start):
            self._held = head[len(self.start) :]
            self.inside = True
        return True

    def _answer(self) -> list[Part]:
        """What is held, as answer text (not the blank lines right after the block)."""
        if self.closed and not self._answered:
            self._held = self._held.lstrip("\n")
            if not self._held:
                return []
            self._answered = True
        text, self._held = self._held, ""
        return [("text", text)]

    def _reason(self, out: list[Part]) -> bool:
        """Reasoning up to the end marker, onto `out`: True if the block closed."""
        at = self._held.find(self.end)
        if at < 0:
            released, self._held = held_back(self._held, self.end)
            if released:
                out.append(("reasoning", released))
            return False
        if at:
            out.append(("reasoning", self._held[:at]))
        self._held = self._held[at + len(self.end) :]
        self.inside = False
        self.closed = True
        return True

    def finish(self) -> list[Part]:
        held, self._held = self._held, ""
        if self.closed and not self._answered and not self.inside:
            held = held.lstrip("\n")
        if not held:
            return []
        return [("reasoning" if self.inside else "text", held)]
