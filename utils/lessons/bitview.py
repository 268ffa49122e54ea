"""HTML for a number's bits coloured by field (chapter 02's widget renders `utils.lessons.formats.describe`)."""

from __future__ import annotations

import html
from collections.abc import Iterable

from utils.lessons.formats import Stored

FIELD_COLOURS = ("#d1242f", "#1f6feb", "#1a7f37")  # sign, exponent, mantissa


def bits_html(stored: Stored) -> str:
    """One format's bits as coloured spans (sign red, exponent blue, mantissa green)."""
    if not isinstance(stored, Stored):
        raise TypeError(f"stored must be a utils.lessons.formats.Stored, got {type(stored).__name__}")
    parts = stored.bits.split(" ")
    colours = FIELD_COLOURS if len(parts) == 3 else FIELD_COLOURS[1:]
    return " ".join(f'<span style="color:{c};font-family:monospace;font-weight:bold">{p}</span>'
                    for p, c in zip(parts, colours, strict=False))


def stored_table_html(rows: Iterable[Stored]) -> str:
    """A table of several formats storing the same number: bits, stored value, error, outcome."""
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
        raise TypeError(f"rows must be an iterable of utils.lessons.formats.Stored, got {type(rows).__name__}")
    rows = list(rows)
    for i, s in enumerate(rows):
        if not isinstance(s, Stored):
            raise TypeError(f"rows[{i}] must be a utils.lessons.formats.Stored, got {type(s).__name__}")
    body = []
    for s in rows:
        body.append(
            f"<tr><td>{html.escape(s.fmt)}</td><td>{bits_html(s)}</td><td>{s.value!r}</td>"
            f"<td>{s.abs_error:.3g}</td><td>{s.rel_error:.3g}</td><td>{html.escape(s.outcome)}</td></tr>")
    head = "<tr><th>format</th><th>bits (sign exponent mantissa)</th><th>stored value</th>" \
           "<th>abs error</th><th>rel error</th><th>what happened</th></tr>"
    return f"<table>{head}{''.join(body)}</table>"
