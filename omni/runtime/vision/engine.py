"""A vision-language model's engine: the text engine (omni.runtime.chat.engine: its process,
its pipe, its detokenizing, cancels, failures) around mlx-vlm's model in an engine process of
its own (omni.runtime.vision.worker). Prompts are rendered with the model's processor, which
expands each image into the image tokens its vision tower fills: a prompt's token count holds
its images' tokens."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni.ports.chat import Capabilities, Messages, Tools
from omni.runtime.chat.engine import MLXEngine
from omni.runtime.vision import worker


class VLMEngine(MLXEngine):
    worker_main: Callable[..., None] = staticmethod(worker.main)
    _processor: Any = None

    def _load_tokenizer(self, eos: Any) -> None:
        super()._load_tokenizer(eos)
        self._processor = _load_processor(self.source.path)

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities, vision=True)

    def render(self, messages: Messages, tools: Tools, thinking: bool | None = None) -> list[int]:
        """Image parts ({"type": "image", "image": bytes}) become the model's image tokens,
        as many as its processor makes of each image."""
        import numpy as np

        extra = dict(self.template_args)
        if thinking is not None:
            extra["enable_thinking"] = thinking
        processor = self._processor
        templating = processor if getattr(processor, "chat_template", None) else processor.tokenizer
        text = templating.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False, **extra
        )
        images = [
            worker.open_image(part["image"])
            for message in messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "image"
        ]
        inputs = processor(text=[text], images=images or None, return_tensors="np")
        return [int(t) for t in np.asarray(inputs["input_ids"])[0]]


def _load_processor(path: str) -> Any:
    """The model's processor (tokenizer, image processor, chat template) as mlx-vlm loads it,
    without its weights."""
    from mlx_vlm.utils import get_model_and_args, load_config, load_image_processor
    from mlx_vlm.utils import load_processor as processor_of

    folder = Path(path)
    config = load_config(folder)
    get_model_and_args(config)  # imports the family's module, which registers its processor
    processor = processor_of(folder, True, eos_token_ids=config.get("eos_token_id"))
    image_processor = load_image_processor(folder)
    if image_processor is not None:
        processor.image_processor = image_processor
    return processor
