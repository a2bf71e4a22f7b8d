"""A tiny random-weight Kokoro as mlx-audio loads one (config.json, model.safetensors in the
original checkpoint's layout, voices/*.safetensors): the real text-to-speech code path, for
tests. Its speech is noise, but of a length one can foretell: each phoneme lasts exactly one
frame of 600 samples at 24 kHz (two at half speed), with one frame more at each end.

Kokoro's decoder has fixed widths (1024 and 512 channels), so it stays ~58M parameters; the
text encoder, ALBERT and the vocoder's resblocks are cut to one layer each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Espeak's phonemes and punctuation: what Kokoro's vocabulary holds (ids from 1; 0 pads).
SYMBOLS = (
    ';:,.!?¡¿—…"«»“” abcdefghijklmnopqrstuvwxyz'
    "ɑɐɒæβɔɕçðʤəɚɛɜɟɡɥɨɪʝɯɰŋɲɳøɸθœɹɾɻʁɽʂʃʈʧʊʋʌɣɤχʎʒʔˈˌːʰʲ↓↑→↗↘ᵻ"
)
VOICE = "ef_tiny"  # 'e': Kokoro reads it as Spanish, whose phonemes espeak-ng gives
SAMPLE_RATE = 24000
FRAME = 600  # samples a phoneme frame speaks: 2 F0 steps x upsampling 10 x 6 x hop 5


def build_tiny_kokoro(out: Path, *, seed: int = 0) -> Path:
    """Write config.json, model.safetensors and voices/ef_tiny.safetensors under `out`."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.kokoro.kokoro import Model, ModelConfig

    out.mkdir(parents=True, exist_ok=True)
    vocab = {s: i + 1 for i, s in enumerate(dict.fromkeys(SYMBOLS))}
    config: dict[str, Any] = {
        "model_type": "kokoro",
        "istftnet": {
            "upsample_kernel_sizes": [10, 6],
            "upsample_rates": [10, 6],
            "gen_istft_hop_size": 5,
            "gen_istft_n_fft": 20,
            "resblock_dilation_sizes": [[1, 3, 5]],
            "resblock_kernel_sizes": [3],
            "upsample_initial_channel": 512,
        },
        "dim_in": 64,
        "dropout": 0.2,
        "hidden_dim": 512,
        "max_conv_dim": 512,
        "max_dur": 1,
        "multispeaker": True,
        "n_layer": 1,
        "n_mels": 80,
        "n_token": len(vocab) + 1,
        "style_dim": 128,
        "text_encoder_kernel_size": 5,
        "plbert": {
            "hidden_size": 32,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 512,
            "num_hidden_layers": 1,
            "dropout": 0.1,
        },
        "vocab": vocab,
        "sample_rate": SAMPLE_RATE,
    }
    mx.random.seed(seed)
    model = Model(ModelConfig.from_dict(config))
    flat: dict[str, Any] = dict(tree_flatten(model.parameters()))
    for key, value in list(flat.items()):
        # Kept as PyTorch lays convolutions out, which the loader's sanitize() turns round.
        if value.ndim == 3 and model.sanitize({key: value})[key].shape != value.shape:
            flat[key] = value.transpose(0, 2, 1)
    # Every phoneme's duration logits saturate: sigmoid(10) x max_dur 1 = one frame each.
    proj = "predictor.duration_proj.linear_layer"
    flat[f"{proj}.weight"] = mx.zeros_like(flat[f"{proj}.weight"])
    flat[f"{proj}.bias"] = mx.full(flat[f"{proj}.bias"].shape, 10.0)
    mx.save_safetensors(str(out / "model.safetensors"), flat)
    (out / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2))
    (out / "voices").mkdir(exist_ok=True)
    pack = mx.random.normal((510, 1, 256)) * 0.1  # a style per input length, as Kokoro's
    mx.save_safetensors(str(out / "voices" / f"{VOICE}.safetensors"), {"voice": pack})
    return out
