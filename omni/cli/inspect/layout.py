"""How a table fits a terminal: ids and numbers whole (an id is pasted into `omni show`),
text columns folded, and, where even that is too wide, whole columns left out in a stated
order. Never a cell cut short or blanked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len

GUTTERS = (2, 1)  # spaces between columns: two, or one where the whole columns need it


@dataclass(frozen=True)
class Column:
    """A table's column. `fold`: the narrowest it may fold to, on more lines (None: never,
    for ids and numbers). `drop`: where the folded columns are still too wide, those with a
    drop are left out, lowest first (0: always shown)."""

    name: str
    fold: int | None = 12
    drop: int = 0


@dataclass(frozen=True)
class Layout:
    shown: tuple[int, ...]  # the columns shown, by index, in their order
    widths: tuple[int, ...]  # their widths
    gutter: int

    @property
    def width(self) -> int:
        return sum(self.widths) + self.gutter * (len(self.widths) - 1)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Layout:
    """The columns shown and their widths within `width`: each text column folds down to its
    `fold` first, then the gutter narrows, then columns are dropped in their order (and one
    dropped early comes back if a wider one's going made room for it). If even
    the columns that stay do not fit, the layout is wider than `width` (the terminal wraps
    the lines; nothing is cut)."""
    natural = [
        max([cell_len(c.name), *(_widest(row[i]) for row in rows)]) for i, c in enumerate(columns)
    ]
    narrowest = [
        n if c.fold is None else min(n, c.fold) for c, n in zip(columns, natural, strict=True)
    ]
    shown = list(range(len(columns)))
    dropped: list[int] = []
    for _, i in sorted((c.drop, i) for i, c in enumerate(columns) if c.drop):
        if _needs(narrowest, shown, GUTTERS[-1]) <= width:  # a narrower gutter, first
            break
        shown.remove(i)
        dropped.append(i)
    # A column dropped before a wider one went may fit where that one was.
    for i in reversed(dropped):
        if _needs(narrowest, [*shown, i], GUTTERS[-1]) <= width:
            shown = sorted([*shown, i])
    gutter = next((g for g in GUTTERS if _needs(narrowest, shown, g) <= width), GUTTERS[-1])
    spare = width - _needs(narrowest, shown, gutter)
    widths = {i: narrowest[i] for i in shown}
    # What is left unfolds whole the columns that need least, then the others from the left.
    for i in sorted(shown, key=lambda i: natural[i] - narrowest[i]):
        if natural[i] - widths[i] <= spare:
            spare -= natural[i] - widths[i]
            widths[i] = natural[i]
    for i in shown:
        grown = max(0, min(spare, natural[i] - widths[i]))
        spare -= grown
        widths[i] += grown
    return Layout(tuple(shown), tuple(widths[i] for i in shown), gutter)


def _needs(widths: Sequence[int], shown: Sequence[int], gutter: int) -> int:
    return sum(widths[i] for i in shown) + gutter * (len(shown) - 1)


def _widest(cell: str) -> int:
    return max((cell_len(line) for line in cell.splitlines()), default=0)
