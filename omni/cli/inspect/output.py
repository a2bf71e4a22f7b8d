"""Where the inspection commands write: `rich` tables and colours on a terminal, plain
tab-separated text when piped (for grep, cut, awk)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from omni.cli.inspect.layout import Column, fit

STATUS_STYLE = {
    "completed": "green",
    "in_progress": "cyan",
    "queued": "blue",
    "incomplete": "yellow",
    "cancelled": "magenta",
    "failed": "bold red",
}


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def text(value: Any) -> str:
    return "-" if value is None else str(value)


class Out:
    """One command's output: a terminal's (rich) or a pipe's (plain)."""

    def __init__(
        self, stream: TextIO | None = None, pretty: bool | None = None, width: int | None = None
    ):
        self.stream = stream or sys.stdout
        self.pretty = self.stream.isatty() if pretty is None else pretty
        self.console = Console(
            file=self.stream, highlight=False, soft_wrap=not self.pretty, width=width
        )

    def table(
        self, title: str | None, columns: Sequence[Column | str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Rows under a header; the column named STATUS coloured on a terminal, where the
        table fits its width as omni.cli.inspect.layout says (a name: a text column)."""
        specs = [c if isinstance(c, Column) else Column(c) for c in columns]
        cells = [[text(v) for v in row] for row in rows]
        if not self.pretty:
            if title:
                self.line(f"# {title}")
            self.line("\t".join(c.name for c in specs))
            for row in cells:
                self.line("\t".join(_one_line(v) for v in row))
            return
        layout = fit(specs, cells, self.console.width)
        table = Table(
            title=title,
            title_justify="left",
            header_style="bold",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, layout.gutter - 1, 0, 0),  # and the box's one space between columns
        )
        for i, width in zip(layout.shown, layout.widths, strict=True):
            whole = specs[i].fold is None
            table.add_column(specs[i].name, width=width, no_wrap=whole, overflow="fold")
        for row in cells:
            table.add_row(*(self._cell(specs[i].name, row[i]) for i in layout.shown))
        # Wider than the terminal only if the whole columns are: it wraps the lines, and
        # rich, held to the terminal's width, would cut them.
        width = self.console.width
        self.console.width = max(width, layout.width)
        try:
            self.console.print(table)
        finally:
            self.console.width = width

    def pairs(self, title: str, pairs: Sequence[tuple[str, Any]]) -> None:
        """`name: value` lines under a title."""
        if self.pretty:
            self.console.print(Text(title, style="bold underline"))
        else:
            self.line(f"# {title}")
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            shown = text(value)
            if self.pretty:
                line = Text(f"  {key:<{width}}  ", style="dim")
                line.append(shown, style=STATUS_STYLE.get(shown, "") if key == "status" else "")
                self.console.print(line)
            else:
                self.line(f"{key}\t{_one_line(shown)}")

    def block(self, title: str, body: str) -> None:
        """A text as it is (an output, a reasoning), under a title."""
        if self.pretty:
            self.console.print(Text(title, style="bold underline"))
            self.console.print(Text(body or "(none)"))
        else:
            self.line(f"# {title}")
            self.line(body)

    def event(self, time: str, stream: str, seq: int, type_: str, shown: str | None) -> None:
        """One event, as `omni tail` prints it."""
        if not self.pretty:
            self.line(f"{time}\t{stream}\t{seq}\t{type_}\t{_one_line(shown or '')}")
            return
        line = Text(f"{time[11:23]} ", style="dim")
        line.append(f"{stream} ", style="cyan")
        line.append(f"{seq:>4} ", style="dim")
        style = "bold" if type_.endswith(("completed", "failed", "incomplete", "usage")) else ""
        line.append(type_, style=style)
        if shown:
            line.append(f" {shown!r}", style="green")
        self.console.print(line)

    def line(self, value: str) -> None:
        self.stream.write(value + "\n")
        self.stream.flush()

    def _cell(self, column: str, shown: str) -> Text:
        return Text(shown, style=STATUS_STYLE.get(shown, "") if column == "STATUS" else "")


# Every character that ends a line for str.splitlines (a model may write any of them), and tab.
_BREAKS = str.maketrans(dict.fromkeys("\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", " "))


def _one_line(value: str) -> str:
    return value.translate(_BREAKS)
