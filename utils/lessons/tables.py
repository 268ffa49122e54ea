"""Tables as Markdown text: one format for notebooks (rendered) and terminals (read as is)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A Markdown table with aligned columns; floats shown with 4 significant digits."""
    if isinstance(headers, str) or not isinstance(headers, Sequence) or not all(isinstance(h, str) for h in headers):
        raise TypeError(f"headers must be a sequence of strings, got {headers!r:.60}")
    if not headers:
        raise ValueError("headers must name at least one column")
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
        raise TypeError(f"rows must be a sequence of rows (each a sequence of cells), got {type(rows).__name__}")
    rows = list(rows)
    for i, row in enumerate(rows):
        if isinstance(row, str | bytes) or not isinstance(row, Sequence):
            raise TypeError(f"rows[{i}] must be a sequence of cells, got {type(row).__name__}")
    headers = [h.replace("|", "\\|") for h in headers]  # as _cell does: a "|" would end the column, and the table
    body = [[_cell(v) for v in row] for row in rows]
    for i, row in enumerate(body):
        if len(row) != len(headers):
            raise ValueError(f"rows[{i}] has {len(row)} cells but headers has {len(headers)}")
    widths = [max([len(h)] + [len(r[j]) for r in body]) for j, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in body])


def show_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Display a table in a notebook, rendered from Markdown."""
    from IPython.display import Markdown, display

    display(Markdown(format_table(rows, headers)))
