"""The models a server serves, as its flags describe them: `omni serve`'s catalogue flags
(where to find models, how many stay loaded, aliases and the config file that may hold them)
and the catalogue they make, which `omni models` lists too."""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

from omni.catalogue import GB, ModelEntry
from omni.cli.options import Number, add_number, add_switch, env, parsed
from omni.errors import OmniError

# The share of the machine's memory the loaded models' weights get by default: the rest is
# for their prefix caches (--prompt-cache-gb each), the server and everything else.
MEMORY_SHARE = 0.5
# `omni serve`'s flags that name a file or model, each defaulting to OMNI_<FLAG>.
NAMED = (
    ("--config", "FILE", "a TOML file whose [aliases] table maps names to models (flags win)"),
    ("--adapter-path", "DIR",
     "LoRA adapters (an mlx-lm adapter folder) loaded with --model, which then "
     "answers with them; a request may name others with its adapter_path"),
    ("--draft-model", "MODEL",
     "a smaller model of the same vocabulary (an id of the catalogue) that drafts "
     "tokens for --model (speculative decoding: requests are then decoded one at a time); "
     "a request may name one with its draft_model"),
)  # fmt: skip


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """`omni serve`'s flags for its catalogue, the models it keeps loaded and their names."""
    serve.add_argument(
        "--models-dir",
        action="append",
        default=env_list("MODELS_DIR"),
        metavar="DIR",
        help="a folder of mlx-lm model folders and .gguf files to serve too (repeatable; "
        "OMNI_MODELS_DIR: several, separated by the path separator)",
    )
    add_number(serve, Number(
        "--models-memory-gb", float, 0.001, 1e6, None,
        "memory the loaded models' weights may take together: the least recently used idle "
        "one is unloaded before another would pass it (default: a half of this machine's "
        f"memory, {_machine_memory() * MEMORY_SHARE / GB:.1f} GB here)",
    ))  # fmt: skip
    add_number(serve, Number(
        "--max-loaded-models", int, 1, 1024, None,
        "most models loaded at once, whatever their size (default: no count, only memory)",
    ))  # fmt: skip
    idle_ttl = env("MODEL_IDLE_TTL", None)
    serve.add_argument(
        "--model-idle-ttl",
        type=_seconds,
        default=_seconds(idle_ttl) if idle_ttl else None,
        metavar="DURATION",
        help="unload a model idle this long (e.g. 600, 10m, 1h; default: never)",
    )
    serve.add_argument(
        "--alias",
        action="append",
        default=[],
        type=_alias,
        metavar="NAME=MODEL",
        help="let requests name MODEL (an id of the catalogue) as NAME, e.g. gpt-5.5=qwen3-8b "
        "(repeatable)",
    )
    for flag, metavar, help_ in NAMED:
        name = flag.removeprefix("--").replace("-", "_").upper()
        serve.add_argument(flag, default=env(name, None), metavar=metavar, help=help_)
    add_number(serve, Number(
        "--num-draft-tokens", int, 1, 64, "2", "tokens a draft model proposes a step"
    ))  # fmt: skip
    add_switch(
        serve,
        "--no-hf-cache",
        "do not list the MLX models found in the Hugging Face cache (HF_HOME)",
        from_env=False,
    )


def memory_budget(args: argparse.Namespace) -> int | None:
    """The bytes the loaded models may take together: --models-memory-gb, else a share of
    this machine's memory (None: not known here, no bound by memory)."""
    if args.models_memory_gb is not None:
        return int(args.models_memory_gb * GB)
    total = _machine_memory()
    return int(total * MEMORY_SHARE) if total else None


def _machine_memory() -> int:
    """This machine's memory in bytes (0: not known)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def aliases(args: argparse.Namespace) -> dict[str, str]:
    """The config file's [aliases], then --alias (which wins)."""
    found: dict[str, str] = {}
    if args.config:
        try:
            config = tomllib.loads(Path(args.config).read_text())
        except OSError as exc:
            raise OmniError(f"--config {args.config}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise OmniError(f"--config {args.config}: not TOML ({exc})") from None
        table = config.get("aliases", {})
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise OmniError(f"--config {args.config}: [aliases] maps names to model ids")
        found.update(table)
    found.update(dict(args.alias))
    return found


def catalogue(
    args: argparse.Namespace,
    home: Path,
    aliases: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = lambda _message: None,
) -> tuple[list[ModelEntry], ModelEntry | None]:
    """The catalogue `args` describe, and the chat model --model names (None: the default).
    A --model that names nothing found stops the start here, in one line saying what was
    looked for and where."""
    from omni.runtime.loading.catalogue import hf_home, scan

    dirs = [Path(d).expanduser() for d in args.models_dir]
    hf = None if args.no_hf_cache else hf_home()
    spec = getattr(args, "model", None)
    local = _at_path(spec) if spec else None
    entries = scan(home, dirs, hf, named=local)
    if not spec or local is not None:
        named = local
    else:
        named = _named(spec, entries, aliases or {}, _places(home, dirs, hf), progress)
        if named not in entries:  # fetched from the hub just now
            entries.insert(0, named)
    if named is not None and named.kind != "chat":
        raise OmniError(
            f"--model {spec}: {named.id} is a model of kind {named.kind}; --model names the "
            "chat model served by default (requests name the others by their ids)"
        )
    return entries, named


def _at_path(spec: str) -> ModelEntry | None:
    """The model at path `spec`; None: nothing is there."""
    from omni.runtime.loading.catalogue import entry_for

    local = Path(spec).expanduser()
    if not local.exists():
        return None
    entry = entry_for(local.resolve(), "named")
    if entry is None:
        raise OmniError(f"--model {spec}: not an mlx-lm model folder or .gguf file")
    return entry


def _named(
    spec: str,
    entries: list[ModelEntry],
    aliases: Mapping[str, str],
    places: str,
    progress: Callable[[str], None],
) -> ModelEntry:
    """The model `spec` names: an id or alias of the catalogue, else a Hugging Face repo in
    the cache (listed there or not), else one fetched from the hub."""
    from omni.runtime.loading import catalogue, hub
    from omni.runtime.loading.source import is_repo_id

    found = catalogue.find(spec, entries, aliases)
    if found is not None:
        return found
    chat = [e.id for e in entries if e.kind == "chat"]
    looked = (
        f"--model {spec}: model not found. Looked for a chat model's id or alias in the "
        f"catalogue ({_some([*chat, *sorted(aliases)])}), built from {places}; for a folder or "
        ".gguf file at that path; and for a Hugging Face repo id (owner/name) in the cache"
    )
    if not is_repo_id(spec):
        raise OmniError(f"{looked}. `omni models` lists the catalogue.")
    cached = catalogue.cached_repo(catalogue.hf_home(), spec)
    if cached is not None:
        return cached
    try:
        snapshot = hub.fetch(spec, progress, hub.MLX_FILES)
    except OmniError as exc:
        raise OmniError(f"{looked}; then {exc.message}") from None
    entry = catalogue.entry_for(snapshot, "named", spec)
    if entry is None:
        raise OmniError(
            f"--model {spec}: fetched from the Hugging Face hub into {snapshot}, but it is no "
            "MLX model there (a config.json beside safetensors weights)"
        )
    return entry


def _places(home: Path, dirs: list[Path], hf: Path | None) -> str:
    """Where the catalogue's models were looked for, as --model's refusal says it."""
    places = [f"OMNI_HOME/models ({home / 'models'})"]
    places += [f"--models-dir {folder}" for folder in dirs]
    if hf is not None:
        places.append(f"the Hugging Face cache ({hf / 'hub'})")
    return ", ".join(places)


def _some(names: list[str], shown: int = 20) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def env_list(name: str) -> list[str]:
    value = os.environ.get(f"OMNI_{name}") or ""
    return [p for p in value.split(os.pathsep) if p]


def _alias(text: str) -> tuple[str, str]:
    name, sep, model = text.partition("=")
    if not sep or not name.strip() or not model.strip():
        raise argparse.ArgumentTypeError(f"--alias {text!r}: expected NAME=MODEL")
    return name.strip(), model.strip()


def _seconds(text: str) -> float:
    from omni.events.maintenance import parse_duration

    value: float = parsed(parse_duration, " (--model-idle-ttl or OMNI_MODEL_IDLE_TTL)")(text)
    return value
