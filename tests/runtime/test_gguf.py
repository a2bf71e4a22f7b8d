"""convert_gguf checked against GGUF files it did not write.

A tiny random llama is built with mlx-lm in Hugging Face layout, written the
way llama.cpp lays a GGUF out (tensor names, q/k rows permuted for interleaved
RoPE, reversed dims, ggml block formats), converted back and compared on logits.
Float files go through mx.save_gguf; quantized ones (which mx.save_gguf cannot
write) through the small ggml writer below.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.llama import Model, ModelArgs
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from omni.errors import ModelLoadError
from omni.runtime.loading import gguf
from omni.runtime.loading.gguf import convert_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
HEADS, KV_HEADS, HIDDEN = 4, 2, 64
TEXTS = [
    "Hello world, the year 2024 had 366 days.",
    "naïve café — 日本語 and emoji 🙂 in 3.14159 lines",
    "<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}  # fmt: skip


# ---------------------------------------------------------------- tokenizer + model


def train_tokenizer(smollm: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    digits = pre_tokenizers.Digits(individual_digits=True)
    tok.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level]) if smollm else byte_level
    tok.decoder = decoders.ByteLevel()
    corpus = [f"{t} {i} the quick brown fox {i * 37} jumps" for i in range(200) for t in TEXTS]
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


def tokenizer_metadata(tok: Tokenizer, pre: str) -> dict[str, object]:
    spec = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": mx.array(types, dtype=mx.int32),
        "tokenizer.ggml.bos_token_id": mx.array(1, dtype=mx.uint32),
        "tokenizer.ggml.eos_token_id": mx.array(2, dtype=mx.uint32),
        "tokenizer.ggml.unknown_token_id": mx.array(0, dtype=mx.uint32),
        "tokenizer.ggml.padding_token_id": mx.array(2, dtype=mx.uint32),
        "tokenizer.ggml.add_bos_token": mx.array(False),
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }


def build_model(vocab: int, tied: bool) -> Model:
    args = ModelArgs(
        model_type="llama", hidden_size=HIDDEN, num_hidden_layers=2, intermediate_size=128,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, rms_norm_eps=1e-5,
        vocab_size=vocab, rope_theta=10000.0, tie_word_embeddings=tied,
    )  # fmt: skip
    mx.random.seed(0)
    model = Model(args)
    # Random norm gains, so a misplaced norm cannot hide behind all-ones weights.
    params = {k: (mx.random.uniform(0.5, 1.5, v.shape) if "norm" in k else v)
              for k, v in tree_flatten(model.parameters())}  # fmt: skip
    model.update(tree_unflatten(list(params.items())))
    mx.eval(model.parameters())
    return model


def model_metadata(vocab: int) -> dict[str, object]:
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    return {
        "general.architecture": "llama",
        "general.name": "tiny",
        "llama.vocab_size": u32(vocab),
        "llama.context_length": u32(256),
        "llama.embedding_length": u32(HIDDEN),
        "llama.block_count": u32(2),
        "llama.feed_forward_length": u32(128),
        "llama.attention.head_count": u32(HEADS),
        "llama.attention.head_count_kv": u32(KV_HEADS),
        "llama.rope.dimension_count": u32(HIDDEN // HEADS),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
    }


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's permute: HF rotate-half rows -> interleaved pairs."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_tensors(model: Model) -> dict[str, np.ndarray]:
    out = {}
    for name, value in tree_flatten(model.parameters()):
        w = np.array(value.astype(mx.float32))
        parts = name.split(".")
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        elif name == "lm_head.weight":
            out["output.weight"] = w
        else:
            base = _GGUF_NAMES[".".join(parts[3:-1])]
            if base in ("attn_q", "attn_k"):
                w = permute(w, HEADS if base == "attn_q" else KV_HEADS)
            out[f"blk.{parts[2]}.{base}.weight"] = w
    return out


# ---------------------------------------------------------------- ggml block formats


def _blocks(w: np.ndarray) -> np.ndarray:
    return w.astype(np.float32).reshape(-1, 32)


def q8_0(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    b = _blocks(w)
    d = (np.abs(b).max(1, keepdims=True) / 127).astype(np.float16)
    q = np.round(b / np.where(d == 0, 1, d).astype(np.float32)).clip(-127, 127).astype(np.int8)
    raw = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=1)
    return raw.tobytes(), (q * d.astype(np.float32)).reshape(w.shape)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def q4_0(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    b = _blocks(w)
    maxv = np.take_along_axis(b, np.abs(b).argmax(1)[:, None], 1)
    d = maxv / -8
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    q = np.clip(np.floor(b * inv + 8.5), 0, 15).astype(np.uint8)
    d16 = d.astype(np.float16)
    raw = np.concatenate([d16.view(np.uint8), _pack_nibbles(q)], axis=1)
    return raw.tobytes(), ((q.astype(np.float32) - 8) * d16.astype(np.float32)).reshape(w.shape)


def q4_1(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    b = _blocks(w)
    lo, hi = b.min(1, keepdims=True), b.max(1, keepdims=True)
    d = (hi - lo) / 15
    q = np.clip(np.round((b - lo) / np.where(d == 0, 1, d)), 0, 15).astype(np.uint8)
    d16, m16 = d.astype(np.float16), lo.astype(np.float16)
    raw = np.concatenate([d16.view(np.uint8), m16.view(np.uint8), _pack_nibbles(q)], axis=1)
    deq = q * d16.astype(np.float32) + m16.astype(np.float32)
    return raw.tobytes(), deq.reshape(w.shape)


def f16(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    h = w.astype(np.float16)
    return h.tobytes(), h.astype(np.float32)


def f32(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    return w.astype(np.float32).tobytes(), w.astype(np.float32)


GGML_TYPE = {f32: 0, f16: 1, q4_0: 2, q4_1: 3, q8_0: 8}


# ---------------------------------------------------------------- a minimal GGUF v3 writer


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return _s(key) + struct.pack("<I", 8) + _s(value)
    if isinstance(value, list):
        return _s(key) + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_s(v) for v in value)
    arr = np.array(value)
    code, fmt = {"uint32": (4, "<I"), "int32": (5, "<i"), "float32": (6, "<f"),
                 "bool": (7, "<?")}[str(arr.dtype)]  # fmt: skip
    if arr.ndim == 0:
        return _s(key) + struct.pack("<I", code) + struct.pack(fmt, arr.item())
    return _s(key) + struct.pack("<IIQ", 9, code, arr.size) + arr.astype(fmt).tobytes()


def write_gguf(path: Path, meta: dict[str, object], tensors: list[tuple[str, int, tuple, bytes]]):
    """tensors: (name, ggml type, numpy shape, raw data). Dims are written innermost first."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items())
    data, infos = b"", b""
    for name, kind, shape, raw in tensors:
        data += b"\0" * (-len(data) % 32)
        infos += (
            _s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape[::-1])
        )
        infos += struct.pack("<IQ", kind, len(data))
        data += raw
    head += infos
    path.write_bytes(head + b"\0" * (-len(head) % 32) + data)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tokenizers_by_pre() -> dict[str, Tokenizer]:
    return {"smollm": train_tokenizer(smollm=True), "gpt-2": train_tokenizer(smollm=False)}


def make_gguf(path: Path, tok: Tokenizer, pre: str, quant: dict[str, object], tied: bool):
    """Write a tiny llama GGUF; `quant` maps tensor-name substrings to a format (first match).

    Returns the reference model, holding exactly the weights the file encodes.
    """
    vocab = tok.get_vocab_size()
    model = build_model(vocab, tied)
    tensors, reference = [], {}
    for name, w in gguf_tensors(model).items():
        fmt = f32 if w.ndim == 1 else next(f for key, f in quant.items() if key in name)
        raw, deq = fmt(w)
        tensors.append((name, GGML_TYPE[fmt], w.shape, raw))
        reference[name] = deq
    write_gguf(path, {**model_metadata(vocab), **tokenizer_metadata(tok, pre)}, tensors)
    # Load the dequantized values back into the HF-layout model (undoing the permute).
    inverse = {v: k for k, v in _GGUF_NAMES.items()}
    for gname, deq in reference.items():
        parts = gname.split(".")
        if parts[0] == "blk":
            if parts[2] in ("attn_q", "attn_k"):
                n = HEADS if parts[2] == "attn_q" else KV_HEADS
                deq = (
                    deq.reshape(n, deq.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(deq.shape)
                )
            hf = f"model.layers.{parts[1]}.{inverse[parts[2]]}.weight"
        else:
            hf = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                  "output": "lm_head"}[parts[0]] + ".weight"  # fmt: skip
        model.load_weights([(hf, mx.array(deq))], strict=False)
    return model


def assert_same_logits(reference: Model, folder: Path, tok: Tokenizer, rtol: float) -> None:
    loaded, _ = mlx_lm.load(str(folder))
    for text in TEXTS:
        ids = mx.array([tok.encode(text).ids])
        want = np.array(reference(ids).astype(mx.float32))
        got = np.array(loaded(ids).astype(mx.float32))
        scale = np.abs(want).max()
        # A wrong q/k permutation shows up as ~0.2 * scale; rounding stays below 1e-3.
        assert np.abs(got - want).max() <= rtol * scale, f"{text!r}: logits differ"


def make_float_gguf(path: Path, tok: Tokenizer, dtype: mx.Dtype, tied: bool) -> Model:
    """The float variants go through MLX's own GGUF writer."""
    vocab = tok.get_vocab_size()
    model = build_model(vocab, tied)
    arrays = {k: mx.array(v).astype(dtype if v.ndim == 2 else mx.float32)
              for k, v in gguf_tensors(model).items()}  # fmt: skip
    mx.save_gguf(str(path), arrays, {**model_metadata(vocab), **tokenizer_metadata(tok, "smollm")})
    if dtype == mx.float16:
        model.update(tree_unflatten([(k, v.astype(mx.float16).astype(mx.float32))
                                     for k, v in tree_flatten(model.parameters())]))  # fmt: skip
    return model


# ---------------------------------------------------------------- tests: weights


@pytest.mark.parametrize(
    ("dtype", "tied", "rtol"), [(mx.float32, False, 1e-5), (mx.float16, True, 2e-3)]
)
def test_float_gguf_matches_original_logits(tmp_path, tokenizers_by_pre, dtype, tied, rtol):
    tok = tokenizers_by_pre["smollm"]
    reference = make_float_gguf(tmp_path / "tiny.gguf", tok, dtype, tied)
    folder = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "out")
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is tied and "quantization" not in config
    assert config["rope_traditional"] is True and config["rms_norm_eps"] == 1e-5
    assert_same_logits(reference, folder, tok, rtol)


QUANTIZED = {
    "q8_0": ({"": q8_0}, False, {"bits": 8, "group_size": 32}),
    "q4_0": ({"": q4_0}, False, {"bits": 4, "group_size": 32}),
    # Like SmolLM2's file: Q4_1 blocks, a Q8_0 embedding, tied output.
    "q4_1": ({"token_embd": q8_0, "": q4_1}, True, {"bits": 4, "group_size": 32}),
    "mixed": (
        {
            "token_embd": q8_0,
            "attn_v": f16,
            "attn": q8_0,
            "ffn_down": q4_0,
            "output": f32,
            "": q4_1,
        },
        False,
        {"bits": 8, "group_size": 32},  # the most common pair; the others are overrides
    ),
}


@pytest.mark.parametrize("variant", sorted(QUANTIZED))
def test_quantized_gguf_matches_dequantized_logits(tmp_path, tokenizers_by_pre, variant):
    quant, tied, expected = QUANTIZED[variant]
    tok = tokenizers_by_pre["smollm"]
    reference = make_gguf(tmp_path / "tiny.gguf", tok, "smollm", quant, tied)
    folder = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "out")
    q = json.loads((folder / "config.json").read_text())["quantization"]
    assert {k: q[k] for k in ("bits", "group_size")} == expected
    if variant == "mixed":
        assert q["model.layers.0.mlp.up_proj"] == {"bits": 4, "group_size": 32}
        assert q["model.layers.1.mlp.down_proj"] == {"bits": 4, "group_size": 32}
        assert "model.layers.0.self_attn.q_proj" not in q  # uses the default
        assert "model.layers.0.self_attn.v_proj" not in q  # float16, not quantized
    # Scales are float16, so the quantized embedding's output is float16.
    assert_same_logits(reference, folder, tok, rtol=3e-3)


# ---------------------------------------------------------------- tests: tokenizer


@pytest.mark.parametrize("pre", ["smollm", "gpt-2"])
def test_tokenizer_matches_source(tmp_path, tokenizers_by_pre, pre):
    tok = tokenizers_by_pre[pre]
    make_gguf(tmp_path / "tiny.gguf", tok, pre, {"": q8_0}, tied=True)
    folder = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "out")
    _, wrapper = mlx_lm.load(str(folder))
    hf = wrapper._tokenizer
    for text in [*TEXTS, "  leading spaces\tand\n\nnewlines 007", "x1y22z333"]:
        assert hf.encode(text) == tok.encode(text).ids
        assert hf.decode(hf.encode(text)) == text
    assert [hf.convert_tokens_to_ids(t) for t in SPECIALS] == [0, 1, 2]
    assert (hf.bos_token, hf.eos_token, hf.unk_token, hf.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_end|>",
    )
    assert wrapper.eos_token_ids == {2}
    prompt = hf.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert hf.decode(hf.encode(prompt), skip_special_tokens=True) == "user\nhi\nassistant\n"


# ---------------------------------------------------------------- tests: refusals


@pytest.fixture
def tiny_gguf(tmp_path, tokenizers_by_pre) -> Path:
    path = tmp_path / "tiny.gguf"
    make_gguf(path, tokenizers_by_pre["smollm"], "smollm", {"": q4_1}, tied=True)
    return path


def _refused(src: Path, out: Path, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match) as err:
        convert_gguf(src, out)
    assert "\n" not in err.value.message
    assert not out.exists() and list(out.parent.glob(f".{out.name}*")) == []


def test_random_bytes_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "junk.gguf").write_bytes(rng.bytes(4096))
    _refused(tmp_path / "junk.gguf", tmp_path / "out", "not a GGUF file")
    # A valid magic and version followed by junk once crashed MLX's own reader.
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + struct.pack("<I", 3) + rng.bytes(4096))
    _refused(tmp_path / "junk.gguf", tmp_path / "out", "corrupt GGUF file junk.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    _refused(tmp_path / "empty.gguf", tmp_path / "out", "corrupt GGUF file")
    _refused(tmp_path / "absent.gguf", tmp_path / "out", "GGUF file not found")


def test_truncated_gguf_is_refused(tmp_path, tiny_gguf):
    data = tiny_gguf.read_bytes()
    for cut, match in [(len(data) - 100, "extends past the end"), (3000, "ends inside its header")]:
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        _refused(tmp_path / "cut.gguf", tmp_path / "out", match)


def _rewrite(src: Path, dst: Path, drop: str = "", **meta: object) -> Path:
    """Copy a float GGUF with some metadata replaced (and maybe a tensor dropped)."""
    tensors, old = mx.load(str(src), return_metadata=True)
    mx.save_gguf(str(dst), {k: v for k, v in tensors.items() if k != drop}, {**old, **meta})
    return dst


def test_unsupported_models_are_refused(tmp_path, tokenizers_by_pre):
    tok = tokenizers_by_pre["smollm"]
    make_float_gguf(tmp_path / "f.gguf", tok, mx.float32, tied=True)
    _rewrite(tmp_path / "f.gguf", tmp_path / "qwen.gguf", **{"general.architecture": "qwen2"})
    _refused(tmp_path / "qwen.gguf", tmp_path / "out", "unsupported GGUF architecture 'qwen2'")
    _rewrite(tmp_path / "f.gguf", tmp_path / "spm.gguf", **{"tokenizer.ggml.model": "llama"})
    _refused(tmp_path / "spm.gguf", tmp_path / "out", "unsupported GGUF tokenizer 'llama'")
    _rewrite(tmp_path / "f.gguf", tmp_path / "holed.gguf", drop="blk.1.ffn_down.weight")
    _refused(
        tmp_path / "holed.gguf", tmp_path / "out", "lacks the weights of layer 1 mlp.down_proj"
    )
    q6k = [("token_embd.weight", 14, (8, 256), b"\0" * 8 * 210)]
    write_gguf(tmp_path / "q6k.gguf", model_metadata(8), q6k)
    _refused(tmp_path / "q6k.gguf", tmp_path / "out", "'token_embd.weight' has type 14")


def test_existing_output_and_interrupted_write_leave_no_half_folder(
    tmp_path, tiny_gguf, monkeypatch
):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ModelLoadError, match="already exists"):
        convert_gguf(tiny_gguf, tmp_path / "taken")

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf.mx, "save_safetensors", interrupted)
    out = tmp_path / "models" / "tiny"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf, out)
    assert list(out.parent.iterdir()) == []
