"""Bursts in an intake trace (bench/intake_trace/sitecustomize.py): for each, ms from its first
request's ASGI call to each request's submit, and the event loop's CPU over that span."""

from __future__ import annotations

import json
import statistics
import sys


def bursts(marks: list[list]) -> list[list[list]]:
    marks = sorted(marks)
    out: list[list[list]] = []
    for m in marks:
        if out and m[0] - out[-1][-1][0] < 0.15:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def main() -> None:
    for path in sys.argv[1:]:
        rows = []
        for b in bursts(json.load(open(path))):
            t0, c0 = b[0][0], b[0][1]
            subs = [m for m in b if m[2] == "submit"]
            if not subs:
                continue
            last = subs[-1]
            asgis = [m for m in b if m[2] == "asgi"]
            hops = []
            opened: dict[int, float] = {}
            for m in b:
                if m[2] == "render>":
                    opened[m[3]] = m[0]
                elif m[2] == "render<" and m[3] in opened:
                    hops.append(m[0] - opened.pop(m[3]))
            per = {}
            for m in b:
                per.setdefault(m[3], {})[m[2]] = m[0]
            a2s = [r["submit"] - r["asgi"] for r in per.values() if "submit" in r and "asgi" in r]
            rows.append(
                (
                    len(subs),
                    (asgis[-1][0] - t0) * 1000,
                    (subs[0][0] - t0) * 1000,
                    (last[0] - t0) * 1000,
                    (last[1] - c0) * 1000,
                    statistics.median(hops) * 1000 if hops else 0.0,
                    statistics.median(a2s) * 1000 if a2s else 0.0,
                )
            )
        print(path)
        print(
            "  n  last asgi  first sub  last sub  loop cpu  render hop p50  asgi->submit p50 (ms)"
        )
        for r in rows:
            cells = f"{r[1]:10.1f} {r[2]:10.1f} {r[3]:9.1f} {r[4]:9.1f} {r[5]:15.2f} {r[6]:17.2f}"
            print(f"{r[0]:3d} {cells}")
        big = [r for r in rows if r[0] >= 8]
        if big:
            print(
                "  medians over bursts of 8+:",
                " ".join(f"{statistics.median(r[i] for r in big):.1f}" for i in range(1, 7)),
            )


if __name__ == "__main__":
    main()
