"""A feature is reported available only where its worker starts: omni/features.py checks the
modules the worker imports as it starts (Feature.load), and each extra installs them."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from omni import features
from omni.errors import NotInstalled

ROOT = Path(__file__).resolve().parents[1]

# The speech worker's start where misaki's English G2P cannot be imported, as where the extra
# did not install it: what the worker tells the server, and what the features say.
WORKER_WITHOUT_MISAKI = """
import json, sys
sys.modules["misaki.en"] = None  # an import of it raises ImportError
from multiprocessing import Pipe
from omni import features
from omni.runtime.speech import worker as speech_worker
here, there = Pipe()
speech_worker.main(there, "/no/model/needed")
print(json.dumps({"worker": here.recv().message, "facts": features.feature("speech").facts()}))
"""


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_feature_whose_worker_cannot_import_a_module_is_unavailable_with_its_install() -> None:
    seen = json.loads(run(WORKER_WITHOUT_MISAKI).splitlines()[-1])
    assert seen["worker"].startswith("NotInstalled: speech cannot import misaki.en")
    assert seen["worker"].endswith("pip install 'omni-mlx[audio]'")
    facts = seen["facts"]
    assert facts["available"] is False and facts["install"] == "pip install 'omni-mlx[audio]'"
    assert "needs misaki.en," in facts["reason"]


@pytest.mark.parametrize("module", ["misaki", "misaki.en", "spacy", "espeakng_loader"])
def test_a_module_the_speech_worker_imports_is_checked_not_only_the_top_package(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    speech = features.feature("speech")
    assert not speech.available() and speech.facts()["install"] == "pip install 'omni-mlx[audio]'"
    with pytest.raises(NotInstalled, match=r"pip install 'omni-mlx\[audio\]'") as refused:
        features.require("speech")
    assert refused.value.status == 501
    assert features.feature("transcription").available()  # Whisper reads no text


def test_a_check_runs_none_of_the_features_libraries() -> None:
    code = (
        "import sys; from omni import features; features.every(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('mlx', 'mlx_audio', 'mlx_vlm', 'mlx_embeddings', 'mflux', 'misaki', 'spacy', 'av')))"
    )
    assert run(code).strip() == "[]"


def test_with_the_test_install_every_feature_is_available_and_its_worker_imports_load() -> None:
    for feature in features.FEATURES.values():
        assert feature.available(), feature.why_not()
    names = list(features.FEATURES)
    run(f"from omni import features\nfor name in {names!r}: features.feature(name).load()")


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group()).lower()


def test_each_features_extra_names_the_distributions_of_what_its_worker_imports() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    providers = importlib.metadata.packages_distributions()
    listed = extras["all"][0].split("[")[1].rstrip("]").split(",")
    everything = {_name(r) for extra in listed for r in extras[extra]}
    for feature in features.FEATURES.values():
        named = {_name(r) for r in extras[feature.extra]}
        for module in feature.modules:
            given = {_name(d) for d in providers.get(module.split(".")[0], [])}
            assert given, f"{module} is not installed here: pip install -e '.[test]'"
            where = f"{feature.name}: {module} comes from {given}"
            assert given & named, f"{where}, which [{feature.extra}] does not name"
            assert given & everything, f"{where}, which [all] does not name"


def test_the_distributed_backends_found_here_are_listed() -> None:
    [facts] = [f for f in features.every() if f["name"] == "distributed"]
    assert facts["available"] and "ring" in facts["backends"]  # type: ignore[operator]
    assert "--ranks N" in str(facts["serves"])
