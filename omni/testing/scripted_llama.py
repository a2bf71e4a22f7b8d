"""A tiny one-layer llama whose weights are set, not random, so that it answers on cue: an
agent's turn against real MLX that ends, and calls a tool when its prompt asks, every time.

A random model never stops and never writes a valid call. This one is built around a few added
tokens: after the generation prompt's last token (ChatML's `assistant\\n`) it writes one whole
reply as one token, then `<|im_end|>`. Which reply is chosen by its one attention head, which
looks back for two cues: none in the prompt, `reply`; the `ask` cue (in a user's prompt),
`call` (a tool call's text); the `told` cue too (in the tool's result, say), `answer`. The
head's query and keys live in RoPE's slowest dimensions (rope_theta 1e30), where position
turns nothing, so a cue is found anywhere in a long prompt; the MLP writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omni.testing.llama import build_tokenizer, llama_config

HIDDEN = 64
HEAD = 16  # 4 query heads of 16; head 0 is the one that looks for the cues
SLOW = 7  # the head's RoPE pair (7, 15), whose angle stays ~1e-26 rad a position
# The hidden dimensions each part of the script writes or reads.
NEWLINE, ASK, TOLD, REPLY, CALL, ANSWER, ASKED, TOLD_OUT = range(8)
PEAK = 10.0  # logit scale: the scripted next token leads by ~70, greedy at any temperature


@dataclass(frozen=True)
class Script:
    """The cues (text the model looks for) and what it writes (each one added token)."""

    ask: str
    told: str
    reply: str
    call: str
    answer: str

    def tokens(self) -> tuple[str, ...]:
        return (self.ask, self.told, self.reply, self.call, self.answer)


def build_scripted_llama(out: Path, script: Script, context: int = 2048) -> Path:
    """An mlx-lm folder at `out` (ChatML, `context` positions) that follows `script`."""
    import mlx.core as mx
    import numpy as np
    from tokenizers import Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, extra=script.tokens())
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = {text: tokenizer.token_to_id(text) for text in ("Ċ", "<|im_end|>", *script.tokens())}
    vocab = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) + 3
    rng = np.random.default_rng(0)

    # Every other token is noise in dimensions 8.., apart from the script's.
    embed = np.zeros((vocab, HIDDEN), np.float32)
    embed[:, 8:] = rng.normal(size=(vocab, HIDDEN - 8))
    placed = [("Ċ", NEWLINE), (script.ask, ASK), (script.told, TOLD), (script.reply, REPLY),
              (script.call, CALL), (script.answer, ANSWER)]  # fmt: skip
    for text, dim in placed:
        embed[ids[text]] = 0.0
        embed[ids[text], dim] = 1.0

    # Head 0: a newline's query finds `ask` (score 20) and, ahead of it, `told` (40); their
    # values write ASKED or TOLD_OUT, ten times the newline's own dimension.
    q = np.zeros((4 * HEAD, HIDDEN), np.float32)
    k = np.zeros((2 * HEAD, HIDDEN), np.float32)
    v = np.zeros((2 * HEAD, HIDDEN), np.float32)
    o = np.zeros((HIDDEN, 4 * HEAD), np.float32)
    q[SLOW, NEWLINE] = 1.0  # RMS norm makes a one-hot 8: q = 8, k = 10 or 20, scale 1/4
    k[SLOW, ASK], k[SLOW, TOLD] = 1.25, 2.5
    v[0, ASK], v[1, TOLD] = 1.0, 1.0
    o[ASKED, 0], o[TOLD_OUT, 1] = 10 / 8, 10 / 8

    head = np.zeros((vocab, HIDDEN), np.float32)
    head[:, 8:] = rng.normal(size=(vocab, HIDDEN - 8)) * 0.05
    head[ids[script.reply], NEWLINE] = PEAK
    head[ids[script.call], ASKED] = PEAK
    head[ids[script.answer], TOLD_OUT] = PEAK
    head[ids["<|im_end|>"], [REPLY, CALL, ANSWER]] = PEAK

    config = {**llama_config(HIDDEN, 1, vocab), "rope_theta": 1e30,
              "tie_word_embeddings": False, "max_position_embeddings": context}  # fmt: skip
    inner = 2 * HIDDEN
    weights = {
        "model.embed_tokens.weight": embed,
        "model.layers.0.self_attn.q_proj.weight": q,
        "model.layers.0.self_attn.k_proj.weight": k,
        "model.layers.0.self_attn.v_proj.weight": v,
        "model.layers.0.self_attn.o_proj.weight": o,
        "model.layers.0.mlp.gate_proj.weight": np.zeros((inner, HIDDEN), np.float32),
        "model.layers.0.mlp.up_proj.weight": np.zeros((inner, HIDDEN), np.float32),
        "model.layers.0.mlp.down_proj.weight": np.zeros((HIDDEN, inner), np.float32),
        "model.layers.0.input_layernorm.weight": np.ones(HIDDEN, np.float32),
        "model.layers.0.post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
        "lm_head.weight": head,
    }
    arrays = {name: mx.array(w) for name, w in weights.items()}
    mx.save_safetensors(str(out / "model.safetensors"), arrays)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
