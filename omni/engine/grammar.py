"""Constrained decoding: `json_schema` and `json_object` output enforced token by token with
llguidance's token masks, applied as an mlx-lm logits processor."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import llguidance
import llguidance.hf
import mlx.core as mx
import numpy as np
from llguidance import LLMatcher

Processor = Callable[[mx.array, mx.array], mx.array]

# Compact JSON, as OpenAI writes it: flexible whitespace lets a small model pad forever.
JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ",",
    "key_separator": ":",
}
CACHE_SIZE = 64  # compiled grammars kept per engine process
_SHIFTS = mx.arange(32, dtype=mx.uint32)


class GrammarError(ValueError):
    """A schema the engine cannot enforce; the message names the unsupported feature."""


def grammar_for(spec: dict[str, Any]) -> str:
    """The llguidance grammar of `{"type": "json_schema", "schema": ...}`,
    `{"type": "json_object"}` or `{"type": "text_or_call", "schema": ...}` (free text that
    does not open with `{`, or one JSON value of the schema), not yet validated."""
    kind = spec.get("type")
    if kind == "answer_or_call":  # an answer in its schema, or a call (both JSON)
        call = json.dumps({**spec.get("schema", {}), "x-guidance": JSON_OPTIONS})
        answer = json.dumps({**spec.get("answer", {}), "x-guidance": JSON_OPTIONS})
        lark = f"start: call | answer\ncall: %json {call}\nanswer: %json {answer}\n"
        try:
            return LLMatcher.grammar_from_lark(lark)
        except ValueError as exc:
            raise GrammarError(f"invalid schema: {exc}") from exc
    if kind == "native_call":  # calls between a model's own markers, JSON inside
        call = json.dumps({**spec.get("schema", {}), "x-guidance": JSON_OPTIONS})
        start, end = json.dumps(spec["start"]), json.dumps(spec["end"])
        body = f'{start} "\\n" call "\\n" {end}'
        if spec.get("required"):
            rules = f"start: {body}\n"
        else:  # free text without the marker, or text then one call
            mark = _regex_escape(spec["start"])
            rules = (
                f'start: PROSE | HEAD "\\n" call "\\n" {end}\n'
                f"PROSE: /(?s:.+)/ & ~/(?s:.*{mark}.*)/\n"
                # text that ends with the marker, and holds it nowhere else
                f"HEAD: /(?s:.*){mark}/ & ~/(?s:.*{mark}.+)/\n"
            )
        try:
            return LLMatcher.grammar_from_lark(rules + f"call: %json {call}\n")
        except ValueError as exc:
            raise GrammarError(f"invalid schema: {exc}") from exc
    if kind == "text_or_call":
        call = json.dumps({**spec.get("schema", {}), "x-guidance": JSON_OPTIONS})
        lark = f"start: call | prose\ncall: %json {call}\nprose: /\\s*[^{{\\s][\\s\\S]*/\n"
        try:
            return LLMatcher.grammar_from_lark(lark)
        except ValueError as exc:
            raise GrammarError(f"invalid schema: {exc}") from exc
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise GrammarError("json_schema needs a 'schema' object")
    else:
        raise GrammarError(f"unsupported constraint type: {kind!r}")
    try:
        return LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)  # type: ignore[arg-type]
    except ValueError as exc:
        raise GrammarError(f"invalid schema: {exc}") from exc


def check_schema(schema: dict[str, Any]) -> None:
    """Validate without a tokenizer, in well under a millisecond for ordinary schemas."""
    _validate(grammar_for({"type": "json_schema", "schema": schema}))


def _validate(grammar: str, tokenizer: llguidance.LLTokenizer | None = None) -> None:
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if failed:
        raise GrammarError(f"schema not supported: {messages[0]}")


class Constraints:
    """One per engine process: the tokenizer as llguidance sees it (about 0.4 s to build for a
    49k vocabulary) and an LRU of compiled matchers by canonical spec."""

    def __init__(self, tokenizer: Any) -> None:
        self.eos = sorted(tokenizer.eos_token_ids)
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer._tokenizer, eos_token=self.eos)
        self._matchers: OrderedDict[str, LLMatcher] = OrderedDict()

    def processor(self, spec: dict[str, Any], resume: Sequence[int] = ()) -> Processor:
        """A fresh processor for one request; `resume` are tokens it already generated (a
        resumed job), which the prompt it first sees ends with."""
        matcher = self._compiled(spec).deep_copy()
        if resume and not matcher.consume_tokens(list(resume)):
            raise GrammarError(f"resumed tokens break the grammar: {matcher.get_error()}")
        return GrammarProcessor(matcher, self.tokenizer.vocab_size, self.eos)

    def _compiled(self, spec: dict[str, Any]) -> LLMatcher:
        key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        matcher = self._matchers.get(key)
        if matcher is not None:
            self._matchers.move_to_end(key)
            return matcher
        grammar = grammar_for(spec)
        _validate(grammar, self.tokenizer)
        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(f"schema not supported: {matcher.get_error()}")
        self._matchers[key] = matcher
        if len(self._matchers) > CACHE_SIZE:
            self._matchers.popitem(last=False)
        return matcher


class GrammarProcessor:
    """mlx-lm's `processor(tokens, logits) -> logits`, stateful per request. `tokens` is the
    sequence's history, so what lies past its length at the previous call was sampled since;
    the first call sees only the prompt, which is not part of the grammar."""

    def __init__(self, matcher: LLMatcher, vocab_size: int, eos: list[int]) -> None:
        self.matcher = matcher
        self._seen: int | None = None
        self._words = np.zeros((1, (vocab_size + 31) // 32), dtype=np.int32)
        self._eos_only = bitmask_of(eos, vocab_size)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        n = tokens.size
        if self._seen is not None and n > self._seen:
            # Through numpy's view of the buffer: an MLX slice and .tolist() cost ~20x more.
            self.matcher.consume_tokens(np.asarray(tokens)[self._seen :].tolist())
        self._seen = n
        if self.matcher.is_stopped() or self.matcher.is_error():
            # Complete, or broken by a token something else forced: only EOS ends it cleanly.
            return apply_bitmask(logits, self._eos_only)
        self.matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        return apply_bitmask(logits, self._words)


def bitmask_of(ids: Sequence[int], vocab_size: int) -> np.ndarray:
    """The (1, words) int32 bitmask allowing exactly `ids`."""
    allowed = np.zeros(32 * ((vocab_size + 31) // 32), dtype=np.bool_)
    allowed[[i for i in ids if i < vocab_size]] = True
    return np.packbits(allowed, bitorder="little").view(np.int32)[None]


def apply_bitmask(logits: mx.array, words: np.ndarray) -> mx.array:
    """-inf for every logit whose bit is clear, and for ids past the mask (a model vocabulary
    wider than the tokenizer's). Unpacked on the device: 4 bytes cross per 32 tokens."""
    return _masked(logits, mx.array(words.view(np.uint32)))


@mx.compile  # one fused kernel rather than six dispatches: about half the time on CPU
def _masked(logits: mx.array, words: mx.array) -> mx.array:
    allowed = ((words[..., None] >> _SHIFTS) & 1).reshape(words.shape[0], -1).astype(mx.bool_)
    width = logits.shape[-1]
    if allowed.shape[-1] >= width:
        allowed = allowed[:, :width]
    else:
        pad = mx.zeros((allowed.shape[0], width - allowed.shape[-1]), dtype=mx.bool_)
        allowed = mx.concatenate([allowed, pad], axis=-1)
    return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))


def _regex_escape(text: str) -> str:
    """`text` as a literal inside a lark /regex/."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$/" else c for c in text)
