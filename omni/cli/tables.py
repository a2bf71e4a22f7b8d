"""What the listing commands print: a table on a terminal, plain aligned columns when piped,
and sizes people read."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if console.is_terminal:
        table = Table(header_style="bold")
        for name in header:
            table.add_column(name, overflow="fold")
        for line in lines:
            table.add_row(*line)
        console.print(table)
    else:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *lines, strict=False)]
        for line in (header, *lines):
            print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def size(n: float) -> str:
    """Bytes as people read them: 512 B, 1.5 KB, 2.0 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
