"""When jobs wait to be prefilled together: an idle engine waits a little for the jobs the
server said are on their way, and jobs still arriving while others decode wait to form one
prefill group, never longer than `gather_s`, and only where BatchGenerator's groups stay full."""

from __future__ import annotations

from omni.runtime.chat import batch_generator
from omni.runtime.chat.solo import SoloPath
from omni.runtime.chat.state import fed_at_most


class Gathering(SoloPath):
    """Whether jobs wait this step to be prefilled together."""

    def _wait_s(self) -> float | None:
        """How long the next look at the pipe may wait: for ever when there is nothing to do,
        not at all when there is, and what is left of the gathering window while an idle
        engine expects more jobs (_expecting)."""
        if not self.busy:
            return None
        now = self.clock()
        return max(0.0, self._oldest_wait + self.gather_s - now) if self._expecting(now) else 0

    def _expecting(self, now: float) -> bool:
        """Whether an idle engine waits for jobs the server said are on their way. Requests
        sent at once cross the server one after another (HTTP, the template, the records:
        ~1 ms each), so their jobs come here a little apart: started as they came, the first
        would run alone while the rest arrive, then move into the batch beside them, and
        they would wait for that. Held until the server has taken in the last of them (its
        job says nobody is behind it), a prefill group's worth is here, or `gather_s` has
        passed since the first, they are prefilled together, as if they had come at once.
        A job that comes alone says nobody is behind it and starts at once."""
        return (
            self._behind > 0
            and not (
                self.slots or self.solo is not None or self.prefills or self.ready or self.group
            )
            and 0 < len(self.waiting) < self.batch.prefill_batch_size
            and now - self._oldest_wait < self.gather_s
        )

    def _gathering(self, now: float, arrived: int) -> bool:
        """Jobs still arriving while others decode wait a little to be prefilled together:
        one forward pass for a group, as when they come at once, not one pass (and one new
        batch shape) for each job of a trickle. They wait while others keep coming, until a
        prefill group's worth are there, and only if one more step keeps the oldest within
        `gather_s` (so where a step takes longer than that, as on a CPU, nobody waits), and
        only jobs of which a group's worth is a chunk of work at most: a longer prompt gains
        nothing from company (a group is padded out to its longest).
        `arrived`: jobs received since the last step."""
        step, self._checked = now - self._checked, now
        running = len(self.slots) + (self.solo is not None) + len(self.group)
        group = self.batch.prefill_batch_size
        return (
            arrived > 0
            and running > 0
            and len(self.waiting) < group
            and running + len(self.waiting) < self.max_batch
            and now - self._oldest_wait + step < self.gather_s
            and not any(self._long(fed_at_most(w)) for w in self.waiting)
        )

    def _groups_align(self) -> bool:
        """Whether jobs handed to BatchGenerator now are prefilled in full groups. It fills a
        prefill group up to its size G counting the prompts it has just prefilled, which move
        to decoding in the same step: more jobs than the room those k leave start a group of
        G - k, and every group after alternates k, G - k (twice the passes). So such jobs wait
        the one step those k take to move on; jobs that fit in the room go at once (so with
        max_batch <= G nobody ever waits here). A long prompt still being prefilled in chunks
        holds nobody up: new jobs join its passes."""
        processing = batch_generator.prefilling(self.batch)
        if not batch_generator.finishing(processing):
            return True
        handed = min(len(self.waiting), self.max_batch - len(self.slots))
        return handed <= self.batch.prefill_batch_size - len(processing)
