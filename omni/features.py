"""What this install can serve beyond chat: each optional feature, the extra that brings it,
and whether it can run here. `omni features` prints these facts and `GET /v1/features`
answers them; an endpoint whose extra is missing answers 501 with the install command
(`require`). Nothing here imports a feature's libraries: finding them is enough to say."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from omni.errors import NotInstalled


@dataclass(frozen=True)
class Feature:
    name: str
    extra: str  # the optional dependency group of pyproject.toml that installs it
    modules: tuple[str, ...]  # importable where the extra is installed
    serves: str  # the endpoints or parts it adds, for people
    platforms: tuple[str, ...] = ("linux", "darwin")  # sys.platform values it runs on
    # A second command after the extra's, on some platforms: (sys.platform, command) pairs.
    then: tuple[tuple[str, str], ...] = ()

    def missing(self) -> list[str]:
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

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

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("embeddings", "embeddings", ("mlx_embeddings",), "POST /v1/embeddings"),
        Feature("speech", "audio", ("mlx_audio", "av"), "POST /v1/audio/speech"),
        Feature(
            "images",
            "images",
            ("mflux", "PIL", "piexif", "platformdirs", "toml"),
            "POST /v1/images/generations",
            then=(("linux", MFLUX_LINUX),),
        ),
        Feature("postgres", "postgres", ("psycopg",), "--db postgresql://… (replicas)"),
        Feature(
            "vision",
            "vision",
            ("mlx_vlm", "PIL"),
            "input_image / image_url parts for vision models",
        ),
        Feature(
            "transcription",
            "audio",
            ("mlx_audio", "av"),
            "POST /v1/audio/transcriptions, /v1/audio/translations",
        ),
    )
}


def feature(name: str) -> Feature:
    return FEATURES[name]


def require(name: str) -> None:
    """Raise NotInstalled (a 501, OpenAI's error shape) naming the install command, unless
    the feature can run here."""
    why = FEATURES[name].why_not()
    if why is not None:
        raise NotInstalled(f"{why}.")


def every() -> list[dict[str, object]]:
    return [f.facts() for f in FEATURES.values()]
