"""The garbage collector's pauses in Omni's two long-lived processes, with what they keep for
life set aside (omni.heap, gc.freeze) and without, against raw mlx-lm's process.

    python bench/heap.py [--model PATH_OR_ID] [--requests 512]

Each process shape is built in a fresh interpreter, the way it is built for serving:
1. raw mlx-lm: `mlx_lm.load` of the model, nothing else (the baseline's pause);
2. the engine process: omni.runtime.worker.main, up to the moment it reports Loaded;
3. the server process: the engine started and the Quart app through its start-up, as
   `omni serve` builds them.
In each, a full collection (`gc.collect()`, the one a process meets every few hundred
requests) is timed 5 times, before and after `set_aside`. Then, in two fresh servers (set aside
and not), --requests chat completions of one token through the app's test client, 64 at a time:
the collections of each generation, the longest pause and the collector's time a request.
Without --model a tiny random-weight llama (4 layers, 256 wide) is built in a temporary folder.
Prints a table and writes bench/out/heap.json and bench/out/heap.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import Bars, write_results  # noqa: E402
from _server import model_or_tiny  # noqa: E402

# Each snippet builds one process's heap, then calls pauses() (defined in PAUSES).
PAUSES = """
import gc, json, statistics, sys, time
def collect_ms():
    start = time.perf_counter(); gc.collect(); return 1000 * (time.perf_counter() - start)
def pauses(freeze):
    from omni.heap import set_aside
    gc.unfreeze(); gc.collect()
    walked = len(gc.get_objects())
    before = [collect_ms() for _ in range(5)]
    after = None
    if freeze:
        set_aside("bench")
        after = [collect_ms() for _ in range(5)]
    print(json.dumps({"objects": walked, "full_ms": before, "frozen_full_ms": after}))
"""

RAW = """
from mlx_lm import load
model, tokenizer = load(PATH)[:2]
pauses(False)
"""

ENGINE = """
import threading
from multiprocessing import Pipe
from omni.runtime import worker
from omni.runtime.wire import Close, Loaded
from omni.settings import EngineSettings
ours, theirs = Pipe()
settings = EngineSettings(prompt_cache_entries=16, prompt_cache_bytes=1 << 30, max_batch=64)
thread = threading.Thread(target=worker.main, args=(theirs, PATH, settings))
thread.start()
assert isinstance(ours.recv(), Loaded)
pauses(True)
ours.send(Close()); thread.join()
"""

# The server as `omni serve` builds it (omni.cli.serve), started through its lifespan.
SERVER = """
import asyncio, os, tempfile
from omni.api.app import Settings, create_app
from omni.runtime.mlx_engine import MLXEngine
from omni.runtime.model_source import ModelSource
from omni.heap import set_aside
engine = MLXEngine(ModelSource(PATH, "bench"), max_batch=64)
engine.start()
app = create_app(Settings(db_path=os.path.join(tempfile.mkdtemp(), "omni.db")), engine)

def on_gc(phase, info):
    if phase == "start":
        on_gc.t = time.perf_counter()
    elif RECORD:
        ms = 1000 * (time.perf_counter() - on_gc.t)
        on_gc.seen.append((info["generation"], ms))
on_gc.seen = []

async def load():
    client = app.test_client()
    async def one(i):
        body = {"model": "bench", "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "user", "content": f"say something about {i}"}]}
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, await r.get_data()
    for start in range(0, REQUESTS, 64):
        await asyncio.gather(*(one(i) for i in range(start, min(REQUESTS, start + 64))))

async def main():
    async with app.test_app():
        if LOAD is None:
            pauses(True)
            return
        if LOAD:
            set_aside("bench")
        await load()  # one unmeasured round of the same size first
        global RECORD
        RECORD = True
        gc.callbacks.append(on_gc)
        t = time.perf_counter()
        await load()
        wall = time.perf_counter() - t
        gc.callbacks.remove(on_gc)
        gens = [[ms for g, ms in on_gc.seen if g == k] for k in range(3)]
        print(json.dumps({
            "collections": [len(g) for g in gens],
            "longest_ms": [max(g, default=0.0) for g in gens],
            "gc_ms_per_request": sum(map(sum, gens)) / REQUESTS,
            "wall_s": wall,
        }))
RECORD = False
asyncio.run(main())
engine.close()
"""


def run(snippet: str, model_path: str, **names: Any) -> dict[str, Any]:
    """A snippet in a fresh interpreter; its last line of output, as JSON."""
    code = PAUSES + f"PATH = {model_path!r}\n"
    code += "".join(f"{k} = {v!r}\n" for k, v in names.items()) + snippet
    # As `omni serve` does: skip finalization (tearing MLX down beside its threads can abort).
    code += "\nsys.stdout.flush()\nimport os\nos._exit(0)\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise SystemExit(f"a measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model_path, model_id = model_or_tiny(ARGS.model, tmp)
        shapes = {
            "raw mlx-lm": run(RAW, model_path),
            "engine process": run(ENGINE, model_path),
            "server process": run(SERVER, model_path, LOAD=None, REQUESTS=0),
        }
        load = {
            "not set aside": run(SERVER, model_path, LOAD=False, REQUESTS=ARGS.requests),
            "set aside": run(SERVER, model_path, LOAD=True, REQUESTS=ARGS.requests),
        }
    raw_ms = statistics.median(shapes["raw mlx-lm"]["full_ms"])
    print(f"model {model_id}; a full collection (gc.collect()), median of 5")
    print(f"{'':<16}{'objects':>9}{'pause ms':>10}{'x raw':>7}{'set aside ms':>14}{'x raw':>7}")
    for name, s in shapes.items():
        s["full_ms_median"] = statistics.median(s["full_ms"])
        line = f"{name:<16}{s['objects']:>9}{s['full_ms_median']:>10.1f}"
        line += f"{s['full_ms_median'] / raw_ms:>7.2f}"
        if s["frozen_full_ms"] is not None:
            frozen = s["frozen_full_ms_median"] = statistics.median(s["frozen_full_ms"])
            line += f"{frozen:>14.2f}{frozen / raw_ms:>7.3f}"
        print(line)
    print(f"\nthe server under load: {ARGS.requests} chat completions of 1 token, 64 at a time")
    print(f"{'':<15}{'collections 0/1/2':>19}{'longest ms 0/1/2':>21}{'GC ms/request':>15}")
    for name, r in load.items():
        counts = "/".join(str(c) for c in r["collections"])
        longest = "/".join(f"{ms:.1f}" for ms in r["longest_ms"])
        print(f"{name:<15}{counts:>19}{longest:>21}{r['gc_ms_per_request']:>15.3f}")
    result = {"model": model_id, "requests": ARGS.requests, "processes": shapes, "load": load}
    pauses = {"raw mlx-lm": raw_ms}
    for name in ("engine process", "server process"):
        pauses[name] = shapes[name]["full_ms_median"]
        pauses[f"{name}, set aside"] = shapes[name]["frozen_full_ms_median"]
    write_results(
        "heap",
        result,
        [
            Bars("a full collection's pause", "ms", pauses),
            Bars(
                f"the server's longest pause in {ARGS.requests} requests",
                "ms",
                {name: max(r["longest_ms"]) for name, r in load.items()},
            ),
        ],
        f"garbage collector, {model_id}",
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="mlx-lm folder or repo id (default: a tiny llama)")
    p.add_argument("--requests", type=int, default=512, help="requests in the load phase")
    ARGS = p.parse_args()
    main()
