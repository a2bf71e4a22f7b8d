"""What this install can serve beyond chat: each optional feature, the extra that brings it,
and whether it can run here. `omni features` prints these facts and `GET /v1/features`
answers them; an endpoint whose extra is missing answers 501 with the install command
(`require`). A feature's modules are what its worker imports as it starts (`Feature.load`,
its first step), so what is reported here is what starts. Checking finds them without running
them: the server never imports MLX or a feature's libraries for it."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass

from omni.errors import NotInstalled


@dataclass(frozen=True)
class Feature:
    name: str
    extra: str  # the optional dependency group of pyproject.toml that installs it
    # What its worker imports as it starts (load()), the imports of its libraries' own lazy
    # parts included: finding a module does not run it, so each one it pulls in is named.
    modules: tuple[str, ...]
    serves: str  # the endpoints or parts it adds, for people
    platforms: tuple[str, ...] = ("linux", "darwin")  # sys.platform values it runs on
    # A second command after the extra's, on some platforms: (sys.platform, command) pairs.
    then: tuple[tuple[str, str], ...] = ()

    def missing(self) -> list[str]:
        """Each module it lacks, named by its first part that is missing (`mflux`, not one of
        mflux's modules, where mflux is not installed at all), once."""
        gone = (_first_missing(m) for m in self.modules)
        return list(dict.fromkeys(m for m in gone if m is not None))

    def load(self) -> None:
        """Import its modules: the first thing its worker does, so that a library missing
        fails the start, not a request, and says how to install it (NotInstalled)."""
        for module in self.modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise NotInstalled(
                    f"{self.name} cannot import {module} ({exc}): {self.install()}"
                ) from None

    def runs_here(self) -> bool:
        return sys.platform in self.platforms

    def available(self) -> bool:
        return self.runs_here() and not self.missing()

    def install(self, checkout: bool = False) -> str:
        """The command that installs it here (`checkout`: into a source checkout)."""
        where = "-e '." if checkout else "'omni-mlx"
        command = f"pip install {where}[{self.extra}]'"
        then = dict(self.then).get(sys.platform)
        return f"{command} && {then}" if then else command

    def why_not(self) -> str | None:
        """None where it can run; else what stops it, with the command that fixes it."""
        if not self.runs_here():
            only = ", ".join(self.platforms)
            here = sys.platform
            return f"{self.name} does not run on {here} (only {only}: there, {self.install()})"
        missing = self.missing()
        if not missing:
            return None
        return (
            f"{self.name} needs {', '.join(missing)}, which this install lacks: {self.install()}"
            f" (from a checkout: {self.install(checkout=True)}), then restart the server"
        )

    def facts(self) -> dict[str, object]:
        return {
            "name": self.name,
            "extra": self.extra,
            "serves": self.serves,
            "available": self.available(),
            "install": None if self.available() else self.install(),
            "reason": self.why_not(),
        }


# mflux's wheel pins MLX's CUDA build and PyTorch on Linux, which cannot stand beside Omni's
# MLX; its code runs on MLX's CPU build without either. So on Linux the extra brings what
# mflux imports, and mflux itself comes without its pins, at the version tested here.
MFLUX_LINUX = "pip install --no-deps 'mflux==0.24.0'"

# Kokoro reads text through misaki's G2P as it speaks its first words: English through spaCy
# (and num2words), other languages through espeak-ng (phonemizer-fork, espeakng-loader, which
# ships espeak-ng's library). The speech worker imports them as it starts.
KOKORO_G2P = ("misaki.en", "misaki.espeak", "spacy", "num2words", "phonemizer", "espeakng_loader")
FLUX2_KLEIN = "mflux.models.flux2.variants.txt2img.flux2_klein"

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("embeddings", "embeddings", ("mlx_embeddings.utils",), "POST /v1/embeddings"),
        Feature(
            "speech", "audio", ("av", "mlx_audio.tts.utils", *KOKORO_G2P), "POST /v1/audio/speech"
        ),
        Feature(
            "images",
            "images",
            ("PIL", "piexif", "platformdirs", "toml", FLUX2_KLEIN),
            "POST /v1/images/generations",
            then=(("linux", MFLUX_LINUX),),
        ),
        Feature("postgres", "postgres", ("psycopg",), "--db postgresql://… (replicas)"),
        Feature(
            "vision",
            "vision",
            ("PIL", "mlx_vlm.utils", "mlx_vlm.generate"),
            "input_image / image_url parts for vision models",
        ),
        Feature(
            "transcription",
            "audio",
            ("av", "mlx_audio.stt.models.whisper.whisper"),
            "POST /v1/audio/transcriptions, /v1/audio/translations",
        ),
    )
}


def _first_missing(name: str) -> str | None:
    """The shortest dotted prefix of `name` that `import name` would not find (None: it all
    is), looked up package by package without running any of them (mlx_audio.tts's __init__
    loads MLX). A None in sys.modules, which stops an import, stops this too."""
    parts = name.split(".")
    spec = importlib.util.find_spec(parts[0])  # sys.modules first, as an import
    for n in range(1, len(parts)):
        if spec is None:
            return ".".join(parts[:n])
        here, within = ".".join(parts[: n + 1]), spec.submodule_search_locations
        if within is None:  # not a package: nothing is below it
            return here
        if here in sys.modules:
            module = sys.modules[here]
            spec = None if module is None else module.__spec__
        else:
            spec = importlib.machinery.PathFinder.find_spec(here, list(within))
    return None if spec is not None else name


def feature(name: str) -> Feature:
    return FEATURES[name]


def require(name: str) -> None:
    """Raise NotInstalled (a 501, OpenAI's error shape) naming the install command, unless
    the feature can run here."""
    why = FEATURES[name].why_not()
    if why is not None:
        raise NotInstalled(f"{why}.")


def every() -> list[dict[str, object]]:
    return [*(f.facts() for f in FEATURES.values()), distributed()]


def distributed() -> dict[str, object]:
    """A model sharded over ranks (`omni serve --ranks N`): MLX's backends found here. The
    ring (TCP) comes with MLX; MPI wants its mpirun; NCCL, MLX's CUDA build; JACCL, macOS
    with RDMA over Thunderbolt."""
    import shutil
    from importlib import metadata

    found = ["ring"]
    if shutil.which("mpirun"):
        found.append("mpi")
    if sys.platform == "darwin":
        found.append("jaccl")
    elif any(d.name.startswith("mlx-cuda") for d in metadata.distributions()):  # not imported
        found.append("nccl")
    return {
        "name": "distributed",
        "extra": None,
        "serves": f"--ranks N, --hostfile (MLX's backends here: {', '.join(found)})",
        "available": True,
        "install": None,
        "reason": None,
        "backends": found,
    }
