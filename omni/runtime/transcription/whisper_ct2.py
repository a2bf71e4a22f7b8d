"""Whisper weights converted from CTranslate2's model.bin (faster-whisper's format) into
mlx-audio's Whisper layout: one safetensors file of MLX names, its config, the tokenizer with
Whisper's timestamp tokens, and the feature extractor's settings WhisperProcessor reads.

CTranslate2 fuses the self-attention's query, key and value into one matrix (the key's bias
held as zeros) and the cross-attention's key and value into another; mlx-audio keeps them apart
and its keys have no bias. Its Conv1d weights are (out, kernel, in), CTranslate2's (out, in,
kernel). Reads the file with numpy alone: nothing here imports MLX."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from omni.errors import ModelLoadError

# CTranslate2's DataType ids (include/ctranslate2/types.h).
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
SAMPLE_RATE, N_FFT, HOP, CHUNK_S = 16000, 400, 160, 30
_TIMESTAMPS = CHUNK_S * 50 + 1  # <|0.00|> … <|30.00|>, one each 20 ms


def read_ct2(path: Path) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 model.bin (binary version 6), by name (aliases too)."""
    buf = path.read_bytes()
    offset = 0

    def take(fmt: str) -> Any:
        nonlocal offset
        (value,) = struct.unpack_from(fmt, buf, offset)
        offset += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal offset
        n = take("<H")
        value = buf[offset : offset + n - 1].decode()
        offset += n
        return value

    version = take("<I")
    if version != 6:
        raise ModelLoadError(f"{path.name}: CTranslate2 binary version {version}, not 6")
    spec, _revision = string(), take("<I")
    if spec != "WhisperSpec":
        raise ModelLoadError(f"{path.name} holds a {spec}, not Whisper")
    found: dict[str, np.ndarray] = {}
    for _ in range(take("<I")):
        name, rank = string(), take("<B")
        dims = [take("<I") for _ in range(rank)]
        dtype, size = _DTYPES[take("<B")], take("<I")
        found[name] = np.frombuffer(buf, dtype, size // np.dtype(dtype).itemsize, offset)
        found[name] = found[name].reshape(dims)
        offset += size
    for _ in range(take("<I")):
        alias, target = string(), string()
        found[alias] = found[target]
    return found


def mlx_weights(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2's Whisper variables under mlx-audio's names and shapes."""
    renamed = _Renamed(v)
    for side in ("encoder", "decoder"):
        for n in range(layers(v, side)):
            renamed.block(side, n)
    out = renamed.out
    for conv in ("conv1", "conv2"):
        out[f"encoder.{conv}.weight"] = v[f"encoder/{conv}/weight"].transpose(0, 2, 1)
        out[f"encoder.{conv}.bias"] = v[f"encoder/{conv}/bias"]
    renamed.norm("encoder.ln_post", "encoder/layer_norm")
    renamed.norm("decoder.ln", "decoder/layer_norm")
    out["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    out["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    return {name: np.ascontiguousarray(array) for name, array in out.items()}


class _Renamed:
    """CTranslate2's variables `v` put into `out` under mlx-audio's names, part by part."""

    def __init__(self, v: dict[str, np.ndarray]):
        self.v = v
        self.out: dict[str, np.ndarray] = {}

    def block(self, side: str, n: int) -> None:
        """Layer `n` of the encoder's or the decoder's (`side`) blocks."""
        src, dst = f"{side}/layer_{n}", f"{side}.blocks.{n}"
        self.split(f"{dst}.attn", f"{src}/self_attention/linear_0", ("query", "key", "value"))
        self.linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        self.norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        if side == "decoder":
            self.linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            self.split(f"{dst}.cross_attn", f"{src}/attention/linear_1", ("key", "value"))
            self.linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            self.norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
        self.linear(f"{dst}.mlp1", f"{src}/ffn/linear_0")
        self.linear(f"{dst}.mlp2", f"{src}/ffn/linear_1")
        self.norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")

    def linear(self, dst: str, src: str) -> None:
        self.out[f"{dst}.weight"] = self.v[f"{src}/weight"]
        if f"{src}/bias" in self.v:
            self.out[f"{dst}.bias"] = self.v[f"{src}/bias"]

    def norm(self, dst: str, src: str) -> None:
        self.out[f"{dst}.weight"] = self.v[f"{src}/gamma"]
        self.out[f"{dst}.bias"] = self.v[f"{src}/beta"]

    def split(self, dst: str, src: str, names: tuple[str, ...]) -> None:
        weight, bias = self.v[f"{src}/weight"], self.v[f"{src}/bias"]
        width = weight.shape[1]
        for i, name in enumerate(names):
            self.out[f"{dst}.{name}.weight"] = weight[i * width : (i + 1) * width]
            if name != "key":  # zeros in CTranslate2's fused bias; none in mlx-audio's
                self.out[f"{dst}.{name}.bias"] = bias[i * width : (i + 1) * width]


def layers(v: dict[str, np.ndarray], side: str) -> int:
    n = 0
    while f"{side}/layer_{n}/ffn/linear_0/weight" in v:
        n += 1
    return n


def dimensions(v: dict[str, np.ndarray]) -> dict[str, Any]:
    """mlx-audio's ModelDimensions, read off the weights' shapes and the heads' counts."""
    vocab, width = v["decoder/embeddings/weight"].shape
    return {
        "model_type": "whisper",
        "n_mels": int(v["encoder/conv1/weight"].shape[1]),
        "n_audio_ctx": int(v["encoder/position_encodings/encodings"].shape[0]),
        "n_audio_state": int(width),
        "n_audio_head": int(v["encoder/num_heads"]),
        "n_audio_layer": layers(v, "encoder"),
        "n_vocab": int(vocab),
        "n_text_ctx": int(v["decoder/position_encodings/encodings"].shape[0]),
        "n_text_state": int(width),
        "n_text_head": int(v["decoder/num_heads"]),
        "n_text_layer": layers(v, "decoder"),
    }


def with_timestamps(tokenizer: dict[str, Any], first_id: int) -> dict[str, Any]:
    """The tokenizer.json with Whisper's timestamp tokens after its last added token
    (faster-whisper's tokenizer.json leaves them out: CTranslate2 decodes them itself)."""
    known = {t["content"] for t in tokenizer["added_tokens"]}
    for i in range(_TIMESTAMPS):
        content = f"<|{i * 0.02:.2f}|>"
        if content not in known:
            tokenizer["added_tokens"].append(
                {"id": first_id + i, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": False}
            )  # fmt: skip
    return tokenizer


def convert(source: Path, target: Path) -> Path:
    """faster-whisper's folder (model.bin, config.json, tokenizer.json) → mlx-audio's."""
    from safetensors.numpy import save_file

    variables = read_ct2(source / "model.bin")
    dims = dimensions(variables)
    target.mkdir(parents=True, exist_ok=True)
    save_file(mlx_weights(variables), str(target / "model.safetensors"))
    (target / "config.json").write_text(json.dumps(dims, indent=2))
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    last = max(t["id"] for t in tokenizer["added_tokens"])
    (target / "tokenizer.json").write_text(json.dumps(with_timestamps(tokenizer, last + 1)))
    end = "<|endoftext|>"
    tokenizer_config = {
        "tokenizer_class": "WhisperTokenizer",
        "processor_class": "WhisperProcessor",
        **{f"{role}_token": end for role in ("bos", "eos", "unk", "pad")},
        "model_max_length": 1024,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    features = {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": dims["n_mels"],
        "sampling_rate": SAMPLE_RATE,
        "hop_length": HOP,
        "chunk_length": CHUNK_S,
        "n_fft": N_FFT,
        "n_samples": CHUNK_S * SAMPLE_RATE,
        "nb_max_frames": CHUNK_S * SAMPLE_RATE // HOP,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    }
    (target / "preprocessor_config.json").write_text(json.dumps(features, indent=2))
    ct2_config = json.loads((source / "config.json").read_text())
    heads = {"alignment_heads": ct2_config.get("alignment_heads") or []}  # word timestamps
    (target / "generation_config.json").write_text(json.dumps(heads))
    return target
