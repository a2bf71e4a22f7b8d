"""A tiny random-weight llama as an mlx-lm folder: the real mlx-lm code path at hundreds of
tokens/s, for tests and benchmarks (its text is noise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A reasoning variant: the prompt opens a think block unless enable_thinking is false.
CHATML_THINKING = CHATML.replace(
    "{{ '<|im_start|>assistant\n' }}",
    "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is not defined or enable_thinking %}"
    "{{ '<think>\n' }}{% endif %}",
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? The capital of France is Paris.",
    "Hello, how are you today? I am fine, thank you.",
    "Omni records every event of every response in a durable log.",
    "Numbers like 12345 and 67890 appear in text too.",
] * 20


def build_tokenizer(
    out: Path, vocab_size: int = 512, thinking: bool = False, extra: tuple[str, ...] = ()
) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        + (["<think>", "</think>"] if thinking else [])
        + list(extra),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHATML_THINKING if thinking else CHATML
    fast.save_pretrained(str(out))


def build_tiny_llama(
    out: Path,
    *,
    layers: int = 2,
    hidden: int = 64,
    seed: int = 0,
    thinking: bool = False,
    extra_tokens: tuple[str, ...] = (),
    context: int = 2048,
) -> Path:
    """Write config.json, model.safetensors and a tokenizer into `out` (`thinking`: with
    <think> and </think> tokens and a template that opens the block; `extra_tokens`: more
    added tokens, such as a family's call markers; `context`: its context length)."""
    import mlx.core as mx
    from mlx_lm.models import llama

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, thinking=thinking, extra=extra_tokens)
    vocab = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) + 3
    config = {**llama_config(hidden, layers, vocab, context), "rope_theta": 10000.0,
              "tie_word_embeddings": False}  # fmt: skip
    mx.random.seed(seed)
    _save(out, llama.Model(llama.ModelArgs(**config)), config)
    return out


def _save(out: Path, model: Any, config: dict[str, Any]) -> list[str]:
    """A random model's weights and config into `out`; the weights' names."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    # A wide random head gives varied greedy text rather than one repeated token.
    flat: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    params = {k: v * 8 if k.startswith("lm_head") else v for k, v in flat}
    mx.save_safetensors(str(out / "model.safetensors"), params)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return list(params)


def build_tiny_ministral3(
    out: Path, *, layers: int = 4, hidden: int = 64, seed: int = 0, context: int = 2048
) -> Path:
    """A tiny random-weight Ministral 3 (a llama with rope scaling): of mlx-lm's models one
    that both shards (tensor parallel, over up to four ranks) and pipelines (over up to
    `layers`); its weight index as sharded_load asks."""
    import mlx.core as mx
    from mlx_lm.models import ministral3

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    vocab = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) + 3
    rope = {"rope_theta": 10000.0, "rope_type": "default", "llama_4_scaling_beta": 0.1,
            "original_max_position_embeddings": 2048}  # fmt: skip
    # Four heads of keys and values too: four ranks take one each (tensor parallel).
    config = {**llama_config(hidden, layers, vocab, context), "model_type": "ministral3",
              "tie_word_embeddings": False, "rope_parameters": rope,
              "num_key_value_heads": 4}  # fmt: skip
    mx.random.seed(seed)
    names = _save(out, ministral3.Model(ministral3.ModelArgs(**config)), config)
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "model.safetensors")}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def llama_config(hidden: int, layers: int, vocab: int, context: int = 2048) -> dict[str, Any]:
    """A tiny llama's config.json (4 heads, 2 of keys and values)."""
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": hidden * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": context,
    }


def build_tiny_adapter(model_dir: Path, out: Path, *, rank: int = 4, seed: int = 0) -> Path:
    """Random LoRA adapters for the tiny llama at `model_dir`, in mlx-lm's adapter folder
    layout (adapter_config.json, adapters.safetensors): loaded with it, they change what it
    writes (lora_b is random, not zero as training starts it)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model = load(str(model_dir))[0]
    layers = len(model.layers)
    lora = {"rank": rank, "scale": 20.0, "dropout": 0.0,
            "keys": ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]}  # fmt: skip
    model.freeze()
    linear_to_lora_layers(model, layers, lora)
    mx.random.seed(seed)
    trained: Any = tree_flatten(model.trainable_parameters())
    weights = {
        name: mx.random.normal(value.shape) * 0.5 if name.endswith("lora_b") else value
        for name, value in trained
    }
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "num_layers": layers, "lora_parameters": lora}
    (out / "adapter_config.json").write_text(json.dumps(config))
    return out
