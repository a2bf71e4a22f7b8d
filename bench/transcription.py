"""Transcription speed: audio seconds heard per wall second through Omni's
/v1/audio/transcriptions against calling mlx-audio's Whisper directly in the same run.

    python bench/transcription.py [--rounds 3] [--model FOLDER]

The model is the default transcription model (Whisper tiny.en, fetched and converted into
OMNI_HOME once) unless --model names a converted folder. The audio is espeak-ng speaking a
passage (PASSAGE, ~25 s: one 30 s window of Whisper's) and the same passage three times (~75 s:
three windows), as wav. A round sends each through a real `omni serve` (a tiny random-weight
chat model beside it), a multipart POST answered as json, and transcribes the same audio with
mlx-audio's `Model.generate` in this process (decoded by the same PyAV decoder: the ratio is
Omni's HTTP, log and process hop); the two alternate which goes first and ratios
are medians of per-round ratios. Both run Whisper as Omni's transcriber does, float32 on the
BLAS it preloads on MLX's CPU build (this script runs again with it); `--stored` adds mlx-audio
as it loads the folder (`mlx_audio.stt.load`, float16 as stored) once, for scale. Writes
bench/out/transcription.json and, for a run on the default model,
bench/results/<cpu|gpu>_transcription.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from _plot import Bars, write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402

PASSAGE = (
    "The event log is the truth, and every read is a projection of it. A response is an "
    "append only stream of the exact events a client is sent. Please open the door and turn "
    "on the lights. The weather is nice today, and we are going to the beach after lunch. "
    "Every modality is a stream in the same log, so the inspector shows them all alike."
)


def speak(text: str, path: Path) -> Path:
    subprocess.run(["espeak-ng", "-s", "150", "-w", str(path), text], check=True)
    return path


def through_omni(base: str, clip: bytes) -> tuple[float, str]:
    start = time.perf_counter()
    res = httpx.post(
        f"{base}/v1/audio/transcriptions",
        files={"file": ("clip.wav", clip, "audio/wav")},
        data={"model": "whisper-tiny.en", "response_format": "json"},
        timeout=600,
    )
    res.raise_for_status()
    return time.perf_counter() - start, str(res.json()["text"])


def direct(model: Any, clip: bytes) -> tuple[float, str]:
    """mlx-audio's Whisper on the clip, decoded by the same PyAV decoder Omni's server uses
    (its time, as Omni's, includes the decoding): the difference is Omni's HTTP, log and
    process hop."""
    import mlx.core as mx
    import numpy as np

    from omni.runtime.transcription.audio import decode

    start = time.perf_counter()
    samples = np.frombuffer(decode(clip).samples, dtype="<f4")
    out = model.generate(mx.array(samples), fp16=model.dtype == mx.float16)
    return time.perf_counter() - start, str(out.text).strip()


def decoders(clip: Path) -> dict[str, float]:
    """Seconds to decode the clip to 16 kHz: PyAV (Omni's) and mlx-audio's own load_audio."""
    import mlx.core as mx
    from mlx_audio.stt.utils import load_audio

    from omni.runtime.transcription.audio import decode

    start = time.perf_counter()
    decode(clip.read_bytes())
    pyav = time.perf_counter() - start
    start = time.perf_counter()
    mx.eval(load_audio(str(clip)))
    return {
        "pyav_s": round(pyav, 3),
        "mlx_audio_load_audio_s": round(time.perf_counter() - start, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a converted Whisper folder (default: whisper-tiny.en)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stored", action="store_true", help="mlx-audio's float16 load once")
    args = parser.parse_args()

    from omni.runtime.platform import blas

    library = blas.preload(blas.AUTO)
    if library and os.environ.get("LD_PRELOAD") != library:
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "LD_PRELOAD": library}
        )
    import mlx.core as mx

    from omni.cli.options import omni_home
    from omni.runtime.transcription.default import ensure_default_transcription
    from omni.runtime.transcription.worker import load

    default = args.model is None
    home = omni_home()
    path = args.model or str(ensure_default_transcription(home, print))
    device = "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"
    work = Path(tempfile.mkdtemp(prefix="omni-bench-stt-"))
    clips = {
        "passage": speak(PASSAGE, work / "passage.wav"),
        "passage_x3": speak(" ".join([PASSAGE] * 3), work / "passage_x3.wav"),
    }
    seconds = {name: _seconds(clip) for name, clip in clips.items()}
    model = load(path)
    chat, _ = model_or_tiny(None, work)
    env = {"OMNI_HOME": str(home)}
    flags = ("--models-dir", str(Path(path).parent)) if not default else ()
    proc, base = start_omni(chat, work / "omni.db", *flags, env=env)
    runs: list[dict[str, Any]] = []
    try:
        through_omni(base, clips["passage"].read_bytes())  # warm: the model loaded on demand
        direct(model, clips["passage"].read_bytes())
        for r in range(args.rounds):
            pair: dict[str, Any] = {}
            order = ("omni", "direct") if r % 2 == 0 else ("direct", "omni")
            for name, clip in clips.items():
                for side in order:
                    if side == "omni":
                        took, text = through_omni(base, clip.read_bytes())
                    else:
                        took, text = direct(model, clip.read_bytes())
                    pair.setdefault(side, {})[name] = {
                        "wall_s": round(took, 3),
                        "audio_s_per_s": round(seconds[name] / took, 2),
                        "words": len(text.split()),
                    }
            runs.append(pair)
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{name} {pair['omni'][name]['audio_s_per_s']} vs "
                    f"{pair['direct'][name]['audio_s_per_s']} audio s/s"
                    for name in clips
                )
            )
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    stored = _stored(path, clips["passage"], seconds["passage"]) if args.stored else None
    decoding = decoders(clips["passage_x3"])
    medians = {
        side: {
            name: round(statistics.median(run[side][name]["audio_s_per_s"] for run in runs), 2)
            for name in clips
        }
        for side in ("omni", "direct")
    }
    ratios = {}
    for name in clips:
        per = [
            run["omni"][name]["audio_s_per_s"] / run["direct"][name]["audio_s_per_s"]
            for run in runs
        ]
        ratios[name] = {
            "median": round(statistics.median(per), 3),
            "min": round(min(per), 3),
            "max": round(max(per), 3),
        }
    result = {
        "model": Path(path).name,
        "device": device,
        "blas": blas.describe(blas.in_use()),
        "threads": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "rounds": args.rounds,
        "audio_s": {name: round(s, 2) for name, s in seconds.items()},
        "medians_audio_s_per_s": medians,
        "ratios": ratios,
        "stored_float16_direct": stored,
        "decode_passage_x3": decoding,
        "runs": runs,
    }
    print()
    for name in clips:
        r = ratios[name]
        print(
            f"{name} ({seconds[name]:.1f} s of audio): Omni {medians['omni'][name]} audio s/s, "
            f"mlx-audio direct {medians['direct'][name]}: {r['median']:.3f}x "
            f"({r['min']:.3f}-{r['max']:.3f})"
        )
    if stored is not None:
        print(f"mlx-audio as stored (float16), passage: {stored['audio_s_per_s']} audio s/s")
    print(f"decoding passage_x3: {decoding}")
    write_results(
        "transcription",
        result,
        [
            Bars(f"{n} audio s / wall s", "audio s/s", {s: medians[s][n] for s in medians})
            for n in clips
        ],  # fmt: skip
        f"Transcription: {Path(path).name} on the {device}",
    )
    shutil.rmtree(work, ignore_errors=True)
    if default:
        (ROOT / "results").mkdir(exist_ok=True)
        kept = ROOT / "results" / f"{device}_transcription.json"
        shutil.copy(ROOT / "out" / "transcription.json", kept)
        print(f"wrote {kept}")


def _seconds(clip: Path) -> float:
    from omni.runtime.transcription.audio import decode

    return decode(clip.read_bytes()).seconds


def _stored(path: str, clip: Path, seconds: float) -> dict[str, float]:
    from mlx_audio.stt.utils import load as load_stored

    took, _ = direct(load_stored(path), clip.read_bytes())
    return {"wall_s": round(took, 3), "audio_s_per_s": round(seconds / took, 2)}


if __name__ == "__main__":
    main()
