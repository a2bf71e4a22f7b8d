"""Prompts fed by the scheduler itself. A long prompt (more than one chunk of tokens to feed) is
fed one chunk a step on a KV cache of its own, with a decode step of the running streams
between two chunks: it holds them for one chunk at most, nobody is padded out to its length,
and a cancel or a close is heard between chunks. Short prompts are fed a group at a time in one
pass that gives each its first token (omni.runtime.chat.first_tokens), then join the batch."""

from __future__ import annotations

import mlx.core as mx

from omni.runtime.chat import first_tokens
from omni.runtime.chat.decoding import Decoding
from omni.runtime.chat.state import FEED_AT_LEAST, GENERATION_FAILED, Start
from omni.runtime.chat.wire import Failed, Prefilled


class Prefilling(Decoding):
    """Prompts fed by the scheduler: a long one's chunk, a group of short ones."""

    def _prefill_chunk(self) -> None:
        """Feed a long prompt one chunk, leaving its last tokens to feed as it starts. The
        prompts take turns, a chunk each: a short one behind a long one waits a chunk, not the
        whole of it."""
        start = self.prefills[0]
        n = min(self.chunk, len(start.rest) - FEED_AT_LEAST)
        clock = self.clock
        began = clock()
        try:
            with mx.stream(self.batch.stream):
                self.model(mx.array(start.rest[:n])[None], cache=start.cache)
                mx.eval([c.state for c in start.cache])
            mx.clear_cache()  # as BatchGenerator does after each chunk: memory stays flat
        except Exception:  # errors travel as values (their text: the log)
            self._step_failed("prefill step failed")
            self.prefills.popleft()
            self.out.append(Failed(start.id, GENERATION_FAILED))
            return
        seconds = clock() - began
        self.observer.on_prefill(seconds, n, chunk=True)
        self.cache.prefilled(n, seconds)
        fed = len(start.slot.fed) - len(start.rest)
        self._chunked = (start.id, n, fed, len(start.slot.fed))
        self.out.append(Prefilled(start.id, fed + n, len(start.slot.fed)))
        start.rest = start.rest[n:]
        if len(start.rest) <= FEED_AT_LEAST:
            self.ready.append(self.prefills.popleft())
        else:
            self.prefills.rotate(-1)

    def _feed_group(self) -> None:
        """Feed this step's group in one pass that gives each its first token, then let the
        group join the batch's decoding (its next token is computed while the step's outputs
        go to the server)."""
        group, self.group = self.group, []
        rows = [
            first_tokens.Row(
                s.rest,
                s.cache,
                list(s.slot.fed),
                self.samplers(s.slot.spec.sampling),
                s.slot.processors,
            )
            for s in group
        ]
        began = self.clock()
        self._feeding = len(rows)
        try:
            with mx.stream(self.batch.stream):
                fed = first_tokens.feed(self.model, rows)
        except Exception:  # errors travel as values (their text: the log)
            self._step_failed("prefill step failed")
            self.out.extend(Failed(s.id, GENERATION_FAILED) for s in group)
            return
        finally:
            self._feeding = 0
        seconds, tokens = self.clock() - began, sum(len(r.rest) for r in rows)
        self.observer.on_prefill(seconds, tokens, False)
        self.cache.prefilled(tokens, seconds)
        ended: set[int] = set()
        try:
            keep = [i for i, start in enumerate(group) if self._first(start, fed, i, ended)]
        except Exception:  # errors travel as values (their text: the log)
            self._step_failed("generation step failed")
            self.out.extend(Failed(s.id, GENERATION_FAILED) for s in group if s.id not in ended)
            return
        if keep:
            self._join_group(group, rows, fed, keep)

    def _join_group(
        self,
        group: list[Start],
        rows: list[first_tokens.Row],
        fed: first_tokens.Fed,
        keep: list[int],
    ) -> None:
        """The group's rows `keep` (those that did not end at their first token) join the
        batch's decoding."""
        left = [group[i].slot for i in keep]
        try:
            with mx.stream(self.batch.stream):
                uids = first_tokens.join(
                    self.batch,
                    self.model,
                    fed,
                    rows,
                    keep,
                    [slot.spec.sampling.max_tokens - slot.done for slot in left],
                )
        except Exception:  # errors travel as values (their text: the log)
            self._step_failed("generation step failed")
            self.out.extend(Failed(slot.spec.id, GENERATION_FAILED) for slot in left)
            return
        self.slots.update(zip(uids, left, strict=True))

    def _first(self, start: Start, fed: first_tokens.Fed, i: int, ended: set[int]) -> bool:
        """Hand out row `i`'s first token; whether the job goes on (else it ended there, an
        end token or its last, and its cache is kept for reuse; its id is added to `ended`)."""
        slot, token = start.slot, fed.tokens[i]
        spec = slot.spec
        held = list(slot.fed)  # what the pass fed: the first token is not in the cache
        self._started(start)
        if (reason := self._emit(slot, token, fed.logprobs[i])) is None:
            return True
        # Named by what it holds (a cache with no offset, a recurrent state, is taken at its word).
        kept = [c.extract(i) for c in fed.cache]
        self.cache.insert(spec.cache_namespace, held, kept, spec.session)
        self.out.append(self._finished(slot, reason))
        ended.add(spec.id)
        return False
