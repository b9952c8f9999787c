"""Benchmark rows as text: an aligned table for people, JSON lines for programs.

Pure functions from rows to strings; only `muster.cli.bench` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Column(Generic[Row]):
    """One table column: its header and how to show one row's cell."""

    header: str
    cell: Callable[[Row], str]
    numeric: bool = True  # right-aligned


def render_table(columns: Sequence[Column[Row]], rows: Iterable[Row]) -> str:
    """Columns two spaces apart, numbers right-aligned, no trailing blanks."""
    cells = [[c.header for c in columns], *([c.cell(row) for c in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = (
        "  ".join(
            cell.rjust(width) if column.numeric else cell.ljust(width)
            for cell, width, column in zip(line, widths, columns, strict=True)
        ).rstrip()
        for line in cells
    )
    return "\n".join(lines) + "\n"


def render_json_line(row: msgspec.Struct) -> str:
    """One row as one line of JSON, fields in declaration order, ending in a newline."""
    return msgspec.json.encode(row).decode() + "\n"


def number(value: float | None, *, digits: int = 3) -> str:
    """A number for people: at most `digits` decimals, no trailing zeros; "-" for None."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
