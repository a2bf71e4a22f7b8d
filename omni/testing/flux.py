"""A tiny random-weight FLUX.2 [klein] as mflux loads one: the folder of a Hugging Face
snapshot (model_index.json, each part's config.json, the tokenizer) with its weights as
`mflux-save` writes them. The real image generation code path (the Qwen3 text encoder, the
flow transformer, the VAE's decoder, mflux's scheduler) in a second or two on MLX's CPU
build; its pictures are noise.

mflux builds the transformer and the text encoder from the widths its model config gives
(omni.runtime.images.worker reads them from these config.json files); its VAE it always
builds at FLUX.2's widths, then sets every array to the weights it loads. The VAE here has
the same blocks a quarter as wide (GroupNorm's 32 groups are the floor), so what runs is
mflux's own VAE code on narrower arrays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni.testing.llama import build_tokenizer

TEXT_HIDDEN = 32
# Klein's prompt embedding stacks the text encoder's layers 9, 18 and 27: it needs 28.
TEXT_LAYERS = 28
VAE_CHANNELS = (32, 64, 128, 128)  # FLUX.2's (128, 256, 512, 512), a quarter as wide


def build_tiny_flux2(out: Path, *, seed: int = 0) -> Path:
    """Write a tiny FLUX.2 [klein] into `out`."""
    import mlx.core as mx
    from mflux.models.common.weights.saving.model_saver import ModelSaver
    from mflux.models.flux2.model.flux2_text_encoder.qwen3_text_encoder import Qwen3TextEncoder
    from mflux.models.flux2.model.flux2_transformer.transformer import Flux2Transformer
    from mflux.models.flux2.model.flux2_vae.encoder.encoder import Flux2Encoder
    from mflux.models.flux2.model.flux2_vae.vae import Flux2VAE
    from mflux.models.flux2.weights.flux2_weight_definition import Flux2KleinWeightDefinition
    from mlx import nn
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    transformer: dict[str, Any] = {
        "num_layers": 1,
        "num_single_layers": 1,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 3 * TEXT_HIDDEN,
        "axes_dims_rope": [4, 4, 4, 4],  # sums to attention_head_dim
        "timestep_guidance_channels": 32,
    }
    text_encoder: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": TEXT_HIDDEN,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "head_dim": 16,
    }
    mx.random.seed(seed)
    model = nn.Module()  # type: ignore[attr-defined]
    model.transformer = Flux2Transformer(**transformer)
    model.text_encoder = Qwen3TextEncoder(**text_encoder)
    model.vae = Flux2VAE(decoder_block_out_channels=VAE_CHANNELS)
    model.vae.encoder = Flux2Encoder(block_out_channels=VAE_CHANNELS)
    model.tokenizers = {"qwen3": _Wrapped(tokenizer)}
    ModelSaver.save_model(
        model=model, bits=None, base_path=str(out), weight_definition=Flux2KleinWeightDefinition
    )
    configs = {
        "model_index.json": {"_class_name": "Flux2KleinPipeline", "is_distilled": True},
        "transformer/config.json": {"_class_name": "Flux2Transformer2DModel", **transformer},
        "text_encoder/config.json": {"architectures": ["Qwen3ForCausalLM"],
                                     "model_type": "qwen3", **text_encoder},
        "vae/config.json": {"_class_name": "AutoencoderKLFlux2",
                            "block_out_channels": list(VAE_CHANNELS)},
    }  # fmt: skip
    for name, config in configs.items():
        (out / name).write_text(json.dumps(config, indent=2))
    return out


class _Wrapped:
    """What ModelSaver reads of a loaded tokenizer: the transformers one inside."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
