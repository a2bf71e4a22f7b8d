"""`--chat-template-args`: extra arguments reach every render of the chat template, and a
request's own thinking switch still wins."""

from __future__ import annotations

from pathlib import Path

from omni.runtime.chat.engine import MLXEngine
from omni.runtime.loading.source import ModelSource

TEMPLATE = (
    "{% if house_style %}[{{ house_style }}]{% endif %}"
    "{% if enable_thinking is defined %}<think={{ enable_thinking }}>{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
)


def engine(model_dir: Path, **template_args: object) -> MLXEngine:
    from mlx_lm.utils import load_tokenizer

    eng = MLXEngine(ModelSource(str(model_dir), "tiny"), template_args=template_args)
    eng._tokenizer = load_tokenizer(model_dir)  # rendering needs no engine process
    eng._tokenizer._tokenizer.chat_template = TEMPLATE
    return eng


def text(eng: MLXEngine, thinking: bool | None = None) -> str:
    tokens = eng.render([{"role": "user", "content": "hi"}], [], thinking=thinking)
    return str(eng._tokenizer.decode(tokens))


def test_template_args_reach_the_template(tiny_model_dir: Path) -> None:
    assert "[terse]" not in text(engine(tiny_model_dir))
    assert text(engine(tiny_model_dir, house_style="terse")).startswith("[terse]")


def test_a_requests_thinking_switch_wins(tiny_model_dir: Path) -> None:
    eng = engine(tiny_model_dir, enable_thinking=True)
    assert "<think=True>" in text(eng)
    assert "<think=False>" in text(eng, thinking=False)
