"""The image worker's pure parts: when partial images are decoded, and how many steps each
quality takes (the drawing itself: tests/api/test_image_generation.py)."""

from __future__ import annotations

import pytest

from omni.runtime.images.worker import partial_steps
from omni.schemas.images import ImageGenerate


@pytest.mark.parametrize(
    ("steps", "partials", "at"),
    [
        (4, 0, []),
        (4, 1, [2]),
        (4, 2, [1, 3]),
        (4, 3, [1, 2, 3]),
        (8, 3, [2, 4, 6]),
        (2, 3, [1]),  # too few steps: fewer partial images, never the last step
        (1, 2, []),
    ],
)
def test_partial_images_are_spread_over_the_steps_before_the_last(
    steps: int, partials: int, at: list[int]
) -> None:
    assert partial_steps(steps, partials) == at


@pytest.mark.parametrize(
    ("quality", "named", "steps"),
    [
        ("low", "low", 2),
        ("auto", "medium", 4),
        ("standard", "medium", 4),
        ("high", "high", 8),
        ("hd", "high", 8),
        ("max", "max", 16),
    ],
)
def test_each_quality_is_a_multiple_of_the_models_steps(
    quality: str, named: str, steps: int
) -> None:
    body = ImageGenerate.model_validate({"prompt": "x", "quality": quality})
    assert (body.quality_name, body.steps(4), body.dimensions) == (named, steps, (1024, 1024))
    assert ImageGenerate.model_validate({"prompt": "x", "quality": "low"}).steps(1) == 1
