"""The catalogue's scan: the defaults first, OMNI_HOME's conversions by their file's name, a
--models-dir's folders and .gguf files (nested too), the Hugging Face cache by repo id at the
revision refs/main names; kinds from each config; files that are no model left out."""

from __future__ import annotations

import json
from pathlib import Path

from omni.runtime.loading.catalogue import cached_repo, find, scan


def model(folder: Path, architectures: list[str], sentence: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": architectures}))
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    if sentence:
        (folder / "modules.json").write_text("[]")
    return folder


def test_a_scan_finds_every_kind_of_place(tmp_path: Path) -> None:
    home, shelf, hf = tmp_path / "home", tmp_path / "shelf", tmp_path / "hf"
    model(home / "models" / "qwen3-0.6b-q8_0-0123456789ab", ["Qwen3ForCausalLM"])  # a conversion
    model(shelf / "Llama-Small", ["LlamaForCausalLM"])
    model(shelf / "deep" / "er" / "bge-small", ["BertModel"])
    whisper = model(shelf / "Whisper-Base", [])
    (whisper / "config.json").write_text(json.dumps({"model_type": "whisper"}))  # mlx-audio's
    (shelf / "phi.gguf").write_bytes(b"GGUF")
    (shelf / "notes.txt").write_text("not a model")
    model(shelf / "no-weights", ["LlamaForCausalLM"]).joinpath("model.safetensors").unlink()
    repo = hf / "hub" / "models--mlx-community--Tiny-4bit"
    model(repo / "snapshots" / "old", ["LlamaForCausalLM"])
    model(repo / "snapshots" / "abc", ["LlamaForCausalLM"], sentence=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc\n")

    entries = scan(home, [shelf], hf)
    found = {e.id: (e.kind, e.origin) for e in entries}
    assert [e.id for e in entries][:2] == ["smollm2-135m-instruct", "all-minilm-l6-v2"]
    assert found == {
        "smollm2-135m-instruct": ("chat", "default"),
        "all-minilm-l6-v2": ("embedding", "default"),
        "whisper-tiny.en": ("transcription", "default"),
        "whisper-base": ("transcription", "models-dir"),
        "qwen3-0.6b-q8_0": ("chat", "home"),
        "llama-small": ("chat", "models-dir"),
        "bge-small": ("embedding", "models-dir"),
        "phi": ("chat", "models-dir"),
        "mlx-community/Tiny-4bit": ("embedding", "hf-cache"),  # the revision refs/main names
    }
    by_id = {e.id: e for e in entries}
    assert by_id["mlx-community/Tiny-4bit"].path.endswith("abc")
    assert by_id["phi"].size_bytes == 4 and by_id["llama-small"].size_bytes == 10 + len(
        json.dumps({"architectures": ["LlamaForCausalLM"]})
    )
    assert by_id["smollm2-135m-instruct"].size_bytes is None  # not fetched yet


def test_the_model_named_at_start_comes_first_and_keeps_its_id(tmp_path: Path) -> None:
    from omni.runtime.loading.catalogue import entry_for

    shelf = tmp_path / "shelf"
    named = entry_for(model(shelf / "Mine", ["LlamaForCausalLM"]), "named")
    assert named is not None
    entries = scan(tmp_path / "home", [shelf], None, named=named)
    assert entries[0].id == "mine" and entries[0].origin == "named"
    assert [e.id for e in entries].count("mine") == 1


def test_a_name_finds_an_id_an_alias_an_id_in_other_case_or_a_cached_repo(
    tmp_path: Path,
) -> None:
    shelf, hf = tmp_path / "shelf", tmp_path / "hf"
    model(shelf / "Llama-Small", ["LlamaForCausalLM"])
    model(shelf / "bge-small", ["BertModel"])
    repo = hf / "hub" / "models--mlx-community--Tiny-4bit"
    model(repo / "snapshots" / "abc", ["LlamaForCausalLM"])
    entries = scan(tmp_path / "home", [shelf], None)  # the cache not listed
    aliases = {"gpt-5.5": "llama-small"}
    names = ("llama-small", "gpt-5.5", "Llama-Small", "llama", "mlx-community/Tiny-4bit")
    found = {name: find(name, entries, aliases) for name in names}
    assert {name: e and e.id for name, e in found.items()} == {
        "llama-small": "llama-small",
        "gpt-5.5": "llama-small",
        "Llama-Small": "llama-small",
        "llama": None,  # no prefix match: a name is the whole id
        "mlx-community/Tiny-4bit": None,
    }
    cached = cached_repo(hf, "mlx-community/Tiny-4bit")
    assert cached is not None and cached.id == "mlx-community/Tiny-4bit"
    assert cached.kind == "chat" and cached.path.endswith("abc")
    assert cached_repo(hf, "mlx-community/Other") is None
