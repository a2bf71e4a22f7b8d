"""Fetching a model from the Hugging Face hub into its cache (HF_HOME): a failure is one line
saying why (no such repository, gated, offline), never the hub client's traceback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from omni.errors import ModelLoadError

# What mlx-lm and mlx-vlm load from a repo (its config, tokenizer, template and safetensors
# weights): not the PyTorch, ONNX or GGUF copies that many repos carry beside them.
MLX_FILES = ("*.json", "*.safetensors", "*.py", "*.model", "*.tiktoken", "*.txt", "*.jsonl",
             "*.jinja")  # fmt: skip


def fetch(repo: str, progress: Callable[[str], None], files: Sequence[str] | None = None) -> Path:
    """The snapshot folder of `repo` (owner/name), downloaded if need be (`files`: only the
    files matching these patterns; None: all)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    progress(f"downloading {repo} from the Hugging Face hub")
    try:
        return Path(snapshot_download(repo, allow_patterns=list(files) if files else None))
    except GatedRepoError:
        why = "the repository is gated: accept its terms on huggingface.co, then log in"
    except RepositoryNotFoundError:
        why = "the hub has no such repository (or it is private: log in)"
    except LocalEntryNotFoundError:
        why = "the hub could not be reached (offline, or HF_HUB_OFFLINE is set)"
    except Exception as exc:  # noqa: BLE001 - a network or disk error, said in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        why = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    raise ModelLoadError(f"cannot fetch {repo} from the Hugging Face hub: {why}")
