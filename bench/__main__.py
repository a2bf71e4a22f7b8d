"""`python -m bench NAME [args...]`: runs bench/NAME.py as `python bench/NAME.py args...` would;
`python -m bench` alone lists the benches, each with its docstring's first sentence."""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> dict[str, str]:
    """Each bench's name and what it measures (its docstring's first sentence), read without
    importing it: a bench may need what this machine lacks (CUDA, llama.cpp)."""
    found = {}
    for path in sorted(HERE.glob("[a-z]*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = re.split(r"(?<=[.?])\s", " ".join(doc.split()), maxsplit=1)[0]
    return found


def main() -> None:
    known = benches()
    if len(sys.argv) < 2 or sys.argv[1] not in known:
        if len(sys.argv) >= 2:
            print(f"no bench named {sys.argv[1]!r}\n", file=sys.stderr)
        width = max(map(len, known))
        print("python -m bench NAME [args...]  (NAME --help: its own flags)\n")
        for name, line in known.items():
            print(f"  {name:<{width}}  {line}")
        raise SystemExit(0 if len(sys.argv) < 2 else 2)
    name = sys.argv[1]
    sys.argv = [str(HERE / f"{name}.py"), *sys.argv[2:]]
    sys.path.insert(0, str(HERE))  # as `python bench/NAME.py` has it: its siblings importable
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
