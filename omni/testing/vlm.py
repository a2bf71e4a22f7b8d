"""Tiny random-weight vision-language models as mlx-vlm folders, with their tokenizers and
image processors built offline: the real mlx-vlm code path for tests (their text is noise).
A LLaVA (a CLIP vision tower, a projector, the tiny llama: a fixed count of image tokens) and a
Qwen2-VL (image tokens in proportion to the picture's size, its grid passed to the model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni.testing.llama import build_tokenizer, llama_config

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 28  # pixels a side: 2 x 2 patches of 14, so an image is 4 prompt tokens
PATCH_SIZE = 14

# ChatML whose content may be a list of text and image parts, as HF vision templates take it.
CHATML_PARTS = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llava(out: Path, *, hidden: int = 64, seed: int = 0) -> Path:
    """Write config.json, model.safetensors, a tokenizer and an image processor into `out`."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models.llava import config as llava
    from mlx_vlm.models.llava.llava import Model
    from transformers import AutoTokenizer, CLIPImageProcessor

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, extra=(IMAGE_TOKEN,))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    tokenizer.chat_template = CHATML_PARTS
    tokenizer.save_pretrained(str(out))
    vocab = len(tokenizer)
    text = llama_config(hidden, 2, vocab)
    vision: dict[str, Any] = {
        "model_type": "clip_vision_model",
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "projection_dim": 32,
    }
    config: dict[str, Any] = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "image_token_index": tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab,
        "eos_token_id": [tokenizer.convert_tokens_to_ids("<|im_end|>")],
    }
    mx.random.seed(seed)
    model_config = _config(
        llava.ModelConfig,
        {
            **config,
            "text_config": _config(llava.TextConfig, text),
            "vision_config": _config(llava.VisionConfig, vision),
        },
    )
    model = Model(model_config)
    flat: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    # A wide random head gives varied greedy text rather than one repeated token.
    params = {k: v * 8 if "lm_head" in k else v for k, v in flat}
    mx.save_safetensors(str(out / "model.safetensors"), params)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    size = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size=size).save_pretrained(str(out))
    processor = {
        "processor_class": "LlavaProcessor",
        "patch_size": PATCH_SIZE,
        "vision_feature_select_strategy": "default",
        "image_token": IMAGE_TOKEN,
        "num_additional_image_tokens": 1,  # CLIP's class token (the default strategy drops it)
    }
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    (out / "chat_template.jinja").write_text(CHATML_PARTS)
    return out


QWEN_IMAGE_TOKENS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>")
QWEN_MERGED_PATCH = 28  # pixels a side of one image token: 14-pixel patches, merged 2 x 2


def build_tiny_qwen2_vl(out: Path, *, seed: int = 0) -> Path:
    """A Qwen2-VL: a picture is resized to whole 28-pixel squares (at least 2 x 2 of them,
    at most 4 x 4), one image token each."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models.qwen2_vl import config as qwen
    from mlx_vlm.models.qwen2_vl.qwen2_vl import Model
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, extra=QWEN_IMAGE_TOKENS)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    template = CHATML_PARTS.replace("'<image>'", "'<|vision_start|><|image_pad|><|vision_end|>'")
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(out))
    token = tokenizer.convert_tokens_to_ids
    vision: dict[str, Any] = {
        "model_type": "qwen2_vl",
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    config: dict[str, Any] = {
        "model_type": "qwen2_vl",
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},  # a head's 16 / 2
        "image_token_id": token("<|image_pad|>"),
        "video_token_id": token("<|video_pad|>"),
        "vision_start_token_id": token("<|vision_start|>"),
        "eos_token_id": [token("<|im_end|>")],
        "vision_config": vision,
    }
    mx.random.seed(seed)
    model_config = _config(qwen.ModelConfig, json.loads(json.dumps(config)))
    model_config.text_config = _config(qwen.TextConfig, model_config.text_config)
    model_config.vision_config = _config(qwen.VisionConfig, vision)
    flat: list[tuple[str, mx.array]] = tree_flatten(Model(model_config).parameters())  # type: ignore[assignment]
    mx.save_safetensors(str(out / "model.safetensors"), dict(flat))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    side = QWEN_MERGED_PATCH
    processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": (2 * side) ** 2,
        "max_pixels": (4 * side) ** 2,
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    (out / "chat_template.jinja").write_text(template)
    return out


def _config(cls: Any, values: dict[str, Any]) -> Any:
    """mlx-vlm's `cls.from_dict(values)` (its configs' classmethod is untyped)."""
    return cls.from_dict(values)
