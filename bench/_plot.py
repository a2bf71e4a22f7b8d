"""PNG plots for the benchmarks: one figure of one or more panels, matplotlib's Agg backend (no
display needed). Each benchmark writes bench/out/<name>.png beside its <name>.json."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # plots are optional: a machine without matplotlib still gets the JSON and the table
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
except ImportError:  # pragma: no cover
    plt = None


@dataclass
class Lines:
    """y against x, one line per series name."""

    title: str
    xlabel: str
    ylabel: str
    series: Mapping[str, tuple[Sequence[float], Sequence[float | None]]]
    logx: bool = False  # log base 2 (concurrency levels 1, 2, 4, ...)
    logy: bool = False
    hlines: Mapping[str, float] = field(default_factory=dict)  # label -> y (a target)


@dataclass
class Bars:
    """One bar per label; the value is printed on top of it."""

    title: str
    ylabel: str
    values: Mapping[str, float]
    fmt: str = "{:.1f}"


Panel = Lines | Bars


def save(path: Path, panels: Sequence[Panel], suptitle: str = "") -> Path:
    """Draw the panels side by side into `path` (a PNG)."""
    if plt is None:
        print(f"matplotlib is not installed: no plot written to {path}")
        return path
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if isinstance(panel, Lines):
            _lines(ax, panel)
        else:
            _bars(ax, panel)
        ax.set_title(panel.title, fontsize=11)
        ax.grid(True, alpha=0.3)
    if suptitle:
        fig.suptitle(suptitle, fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(name: str, result: Any, panels: Sequence[Panel] = (), title: str = "") -> Path:
    """bench/out/<name>.json (the figures) and, given panels, bench/out/<name>.png beside it;
    prints where they went. Returns the folder."""
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    data, png = out / f"{name}.json", out / f"{name}.png"
    data.write_text(json.dumps(result, indent=2))
    if panels:
        save(png, panels, title)
        print(f"wrote {data} and {png}")
    else:
        print(f"wrote {data}")
    return out


def _lines(ax: plt.Axes, panel: Lines) -> None:
    for name, (xs, ys) in panel.series.items():
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
    for label, y in panel.hlines.items():
        ax.axhline(y, linestyle="--", color="gray", label=label)
    if panel.logx:
        ax.set_xscale("log", base=2)
        xs_all = sorted({x for xs, _ in panel.series.values() for x in xs})
        ax.set_xticks(xs_all, [f"{x:g}" for x in xs_all])
    elif all(float(x).is_integer() for xs, _ in panel.series.values() for x in xs):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if panel.logy:
        ax.set_yscale("log")
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.legend(fontsize=9)


def _bars(ax: plt.Axes, panel: Bars) -> None:
    labels = list(panel.values)
    values = [panel.values[k] for k in labels]
    bars = ax.bar(range(len(labels)), values, color=[f"C{i}" for i in range(len(labels))])
    ax.set_xticks(range(len(labels)), labels, fontsize=9)
    ax.set_ylabel(panel.ylabel)
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(
            panel.fmt.format(value),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
