"""Build a fast tokenizer and chat template from GGUF metadata."""

from __future__ import annotations

from typing import Any, cast

from omni.errors import ModelLoadError


def build_tokenizer(meta: dict[str, Any], max_length: int) -> Any:
    """Build a Hugging Face fast tokenizer from the GGUF's gpt2-style BPE vocabulary."""
    # Imported lazily: transformers is slow to import and only conversion needs it.
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if (kind := meta.get("tokenizer.ggml.model")) != "gpt2":
        raise ModelLoadError(f"unsupported GGUF tokenizer {kind!r}: Omni reads gpt2-style BPE")
    tokens: list[str] = list(meta.get("tokenizer.ggml.tokens", []))
    if not tokens:
        raise ModelLoadError("GGUF file has no tokenizer vocabulary")
    raw_types = meta.get("tokenizer.ggml.token_type")
    types = cast(list[int], raw_types.tolist()) if raw_types is not None else [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    try:
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    except Exception as exc:  # tokenizers raises a bare Exception on bad merges
        raise ModelLoadError(f"GGUF tokenizer is malformed: {exc}") from exc
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if meta.get("tokenizer.ggml.pre") == "smollm":
        digits = pre_tokenizers.Digits(individual_digits=True)
        tok.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    if len(types) != len(tokens):
        raise ModelLoadError("GGUF tokenizer has a token_type list of the wrong length")
    # Control tokens are special (skipped when decoding); user-defined ones are not.
    kinds = list(zip(tokens, types, strict=True))
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in kinds if k == 3]
    )
    tok.add_tokens([AddedToken(t, normalized=False) for t, k in kinds if k == 4])
    special: dict[str, str] = {}
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        if (token_id := meta.get(f"tokenizer.ggml.{key}_token_id")) is not None:
            if not 0 <= int(token_id.item()) < len(tokens):
                raise ModelLoadError(f"GGUF {role} token id {int(token_id.item())} is out of range")
            special[f"{role}_token"] = tokens[int(token_id.item())]
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    if "bos_token" in special and add_bos is not None and bool(add_bos.item()):
        bos = special["bos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokens.index(bos))]
        )
    # transformers' tokenizer classes take untyped keywords: called as Any.
    return cast(Any, PreTrainedTokenizerFast)(
        tokenizer_object=tok,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
        chat_template=meta.get("tokenizer.chat_template"),
        **special,
    )
