"""The vision engine on a tiny Qwen2-VL: the processor gives a picture as many image tokens as
its size makes, and the worker hands the model the image grid with the pixels (LLaVA's fixed
count runs end to end in tests/api/test_vision.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from omni.ports.chat import RecommendedSampling
from omni.ports.jobs import Delta, Failed, Finished, Job, Output, Sampling
from omni.runtime.loading.catalogue import takes_images
from omni.runtime.loading.source import ModelSource
from omni.runtime.vision.engine import VLMEngine
from omni.testing.vlm import build_tiny_qwen2_vl


def png(width: int, height: int, color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLMEngine]:
    folder = build_tiny_qwen2_vl(tmp_path_factory.mktemp("models") / "tiny-qwen2-vl")
    assert takes_images(folder)
    advice = {"do_sample": True, "temperature": 0.7, "top_p": 0.8}
    (folder / "generation_config.json").write_text(json.dumps(advice))
    vlm = VLMEngine(ModelSource(str(folder), "tiny-qwen2-vl"))
    vlm.start()
    yield vlm
    vlm.close()


async def generate(engine: VLMEngine, image: bytes) -> tuple[list[int], list[Output]]:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                             {"type": "image", "image": image}]}]  # fmt: skip
    prompt = engine.render(messages, [])
    job = Job(prompt, Sampling(temperature=0.0, max_tokens=4), images=(image,))
    engine.submit(job)
    outputs: list[Output] = []
    while not isinstance(out := await job.outputs.get(), Finished | Failed):
        outputs.append(out)
    return prompt, [*outputs, out]


async def test_image_tokens_follow_the_pictures_size(engine: VLMEngine) -> None:
    assert engine.capabilities.vision
    assert engine.capabilities.sampling == RecommendedSampling(temperature=0.7, top_p=0.8)
    pad = engine._tokenizer.convert_tokens_to_ids("<|image_pad|>")
    square, outputs = await generate(engine, png(60, 60, (255, 0, 0)))  # 56 x 56: 2 x 2
    wide, _ = await generate(engine, png(120, 60, (0, 0, 255)))  # 112 x 56: 4 x 2
    assert (square.count(pad), wide.count(pad)) == (4, 8)
    assert len(wide) == len(square) + 4
    end = outputs[-1]
    assert isinstance(end, Finished) and end.prompt_tokens == len(square)
    assert end.completion_tokens == sum(isinstance(o, Delta) and o.token is not None
                                        for o in outputs) == 4  # fmt: skip
