"""Constrained decoding on the tiny random llama: its text is noise, so any JSON it writes, the
grammar made it write."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator, generate_step
from mlx_lm.sample_utils import make_sampler

from omni.runtime.chat.constraints import Constraints, apply_bitmask, bitmask_of
from omni.tools.grammar import check_schema
from omni.tools.lark import GrammarError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "color"],
    "additionalProperties": False,
}
ROWS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 99},
            "ok": {"type": "boolean"},
        },
        "required": ["id", "ok"],
    },
    "minItems": 1,
    "maxItems": 3,
}
# A finite language: every valid document can be listed, so every prefix can be checked.
FINITE = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 12},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "n", "ok"],
    "additionalProperties": False,
}
FINITE_DOCS = {
    json.dumps({"color": c, "n": n, "ok": ok}, separators=(",", ":"))
    for c, n, ok in itertools.product(["red", "green", "blue"], range(13), [True, False])
}
PROMPT = "Hello, how are you?"


def schema_spec(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "schema": schema}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any, Constraints]:
    model, tokenizer = load(str(tiny_model_dir))[:2]
    return model, tokenizer, Constraints(tokenizer)


def generate(
    tiny: tuple[Any, Any, Constraints],
    spec: dict[str, Any],
    temp: float,
    seed: int = 0,
    before: tuple[Any, ...] = (),
) -> str:
    """Decode until EOS (failing the test if it never comes); the text without it."""
    model, tokenizer, constraints = tiny
    mx.random.seed(seed)
    out: list[int] = []
    steps = generate_step(
        mx.array(tokenizer.encode(PROMPT)),
        model,
        max_tokens=200,
        sampler=make_sampler(temp=temp),
        logits_processors=[*before, constraints.processor(spec)],
    )
    for y, _ in steps:
        if y in tokenizer.eos_token_ids:
            return str(tokenizer.decode(out))
        out.append(int(y))
    raise AssertionError(f"no EOS after 200 tokens: {tokenizer.decode(out)!r}")


def finite(logits: mx.array) -> list[int]:
    """The ids a processor left allowed."""
    return [int(i) for i in np.flatnonzero(np.isfinite(np.array(logits[0], dtype=np.float32)))]


def validate(doc: Any, schema: dict[str, Any]) -> None:
    try:
        import jsonschema
    except ImportError:
        check(doc, schema)
    else:
        jsonschema.validate(doc, schema)


def check(doc: Any, schema: dict[str, Any]) -> None:
    """The keywords these tests use, checked by hand."""
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(doc, dict)
        assert set(schema.get("required", [])) <= set(doc)
        if schema.get("additionalProperties") is False:
            assert set(doc) <= set(schema["properties"])
        for key, sub in schema.get("properties", {}).items():
            if key in doc:
                check(doc[key], sub)
    elif kind == "array":
        assert isinstance(doc, list)
        assert schema.get("minItems", 0) <= len(doc) <= schema.get("maxItems", len(doc))
        for item in doc:
            check(item, schema["items"])
    elif kind == "string":
        assert isinstance(doc, str) and len(doc) <= schema.get("maxLength", len(doc))
    elif kind == "integer":
        assert isinstance(doc, int) and not isinstance(doc, bool)
        assert schema.get("minimum", doc) <= doc <= schema.get("maximum", doc)
    elif kind == "boolean":
        assert isinstance(doc, bool)
    if "enum" in schema:
        assert doc in schema["enum"]


@pytest.mark.parametrize("schema", [PERSON, ROWS], ids=["object", "array-of-objects"])
@pytest.mark.parametrize("temp,seeds", [(0.0, [0]), (1.0, [0, 1, 2])], ids=["greedy", "sampled"])
def test_output_validates_against_the_schema(
    tiny: tuple[Any, Any, Constraints], schema: dict[str, Any], temp: float, seeds: list[int]
) -> None:
    for seed in seeds:
        text = generate(tiny, schema_spec(schema), temp, seed)
        validate(json.loads(text), schema)


def closing_bias(tokenizer: Any) -> Any:
    """A stand-in for a model that wants to finish: a large bonus on `"` and `}`."""
    ids = tokenizer._tokenizer.convert_tokens_to_ids(['"', "}"])

    def bias(tokens: mx.array, logits: mx.array) -> mx.array:
        bonus = mx.zeros(logits.shape[-1])
        bonus[mx.array(ids)] = 30.0
        return logits + bonus

    return bias


@pytest.mark.parametrize("temp", [0.0, 1.0])
def test_json_object_is_an_object(tiny: tuple[Any, Any, Constraints], temp: float) -> None:
    # Noise alone would write one endless string; the bias after it makes an ending likely.
    text = generate(tiny, {"type": "json_object"}, temp, before=(closing_bias(tiny[1]),))
    assert isinstance(json.loads(text), dict)


def test_no_allowed_token_breaks_the_grammar(tiny: tuple[Any, Any, Constraints]) -> None:
    """Random walks over the allowed tokens: each one, decoded after the text so far, still
    prefixes a valid document; EOS is allowed exactly when the text is a whole one; ids the
    model has beyond the tokenizer's vocabulary never are."""
    model, tokenizer, constraints = tiny
    width = model.args.vocab_size
    assert width > len(tokenizer._tokenizer)  # the tiny llama's head is wider
    (eos,) = tokenizer.eos_token_ids
    prompt = tokenizer.encode(PROMPT)
    rng = random.Random(0)
    for _ in range(5):
        processor = constraints.processor(schema_spec(FINITE))
        out: list[int] = []
        while True:
            logits = processor(mx.array(prompt + out), mx.zeros((1, width)))
            allowed = finite(logits)
            text = tokenizer._tokenizer.decode(out)
            assert (eos in allowed) == (text in FINITE_DOCS), text
            assert max(allowed) < len(tokenizer._tokenizer)
            for token in allowed:
                if token != eos:
                    longer = tokenizer._tokenizer.decode([*out, token])
                    assert any(d.startswith(longer) for d in FINITE_DOCS), longer
            token = rng.choice(allowed)
            if token == eos:
                break
            out.append(token)
        assert text in FINITE_DOCS


def test_under_batch_generator(tiny: tuple[Any, Any, Constraints]) -> None:
    """BatchGenerator calls each row's processors with that row's logits[e:e+1]."""
    model, tokenizer, constraints = tiny
    eos = sorted(tokenizer.eos_token_ids)
    schemas = [PERSON, ROWS, PERSON]
    gen = BatchGenerator(model, stop_tokens=[[t] for t in eos], max_tokens=200)
    prompts = [tokenizer.encode(p) for p in (PROMPT, "The quick brown fox", "Numbers like 12")]
    uids = gen.insert(
        prompts, logits_processors=[[constraints.processor(schema_spec(s))] for s in schemas]
    )
    out: dict[int, list[int]] = {uid: [] for uid in uids}
    done: set[int] = set()
    while len(done) < len(uids):
        for r in gen.next_generated():
            if r.finish_reason != "stop":
                out[r.uid].append(int(r.token))
            assert r.finish_reason != "length", tokenizer.decode(out[r.uid])
            if r.finish_reason is not None:
                done.add(r.uid)
    gen.close()
    for uid, schema in zip(uids, schemas, strict=True):
        validate(json.loads(tokenizer.decode(out[uid])), schema)


def test_resumed_tokens_advance_the_grammar(tiny: tuple[Any, Any, Constraints]) -> None:
    """A resumed job's prompt ends with what it generated before the restart."""
    model, tokenizer, constraints = tiny
    head = tokenizer._tokenizer.encode('{"color":"gr', add_special_tokens=False)
    processor = constraints.processor(schema_spec(FINITE), resume=head)
    prompt = tokenizer.encode(PROMPT) + head
    logits = processor(mx.array(prompt), mx.zeros((1, model.args.vocab_size)))
    allowed = finite(logits)
    greens = [d for d in FINITE_DOCS if d.startswith('{"color":"green"')]
    for token in allowed:
        text = tokenizer._tokenizer.decode([*head, token])
        assert any(d.startswith(text) for d in greens), text
    assert allowed


@pytest.mark.parametrize("width", [401, 416, 1000])
def test_bitmask_applies_to_any_logits_width(width: int) -> None:
    ids = [0, 31, 32, 63, 400]  # word edges, the sign bit, the last id
    out = apply_bitmask(mx.zeros((1, width)), bitmask_of(ids, 401))
    assert finite(out) == ids


def test_check_schema_names_an_unsupported_feature() -> None:
    check_schema(PERSON)
    with pytest.raises(GrammarError, match="uniqueItems"):
        check_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    with pytest.raises(GrammarError, match="look-around"):
        check_schema({"type": "string", "pattern": "(?<=a)b"})


def test_bad_specs(tiny: tuple[Any, Any, Constraints]) -> None:
    constraints = tiny[2]
    with pytest.raises(GrammarError):
        constraints.processor({"type": "regex", "pattern": "a+"})
    with pytest.raises(GrammarError):
        constraints.processor({"type": "json_schema"})
    with pytest.raises(GrammarError, match="not"):
        constraints.processor(schema_spec({"not": {"type": "string"}}))
