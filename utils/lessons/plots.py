"""Figures the chapters share: a memory breakdown as a stacked bar against a capacity."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from utils.validate import check_int, check_str


def memory_bar(parts: Mapping[str, int], capacity: int | None = None, title: str = "", unit: int = 2**30,
               unit_name: str = "GiB") -> Figure:
    """One horizontal stacked bar of `parts` (bytes), with the capacity as a vertical line."""
    if not isinstance(parts, Mapping):
        raise TypeError(f"parts must be a mapping of names to byte counts, got {type(parts).__name__}")
    if not parts or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in parts.values()):
        raise ValueError("parts must map names to non-negative byte counts (ints)")
    if capacity is not None:
        check_int("capacity", capacity, minimum=1)
    check_str("title", title, non_empty=False)
    check_int("unit", unit, minimum=1)
    check_str("unit_name", unit_name)
    fig, ax = plt.subplots(figsize=(9, 2.2))
    left = 0.0
    for name, nbytes in parts.items():
        ax.barh(0, nbytes / unit, left=left, label=f"{name}: {nbytes / unit:.2f} {unit_name}")
        left += nbytes / unit
    if capacity is not None:
        ax.axvline(capacity / unit, color="k", linestyle="--", label=f"capacity: {capacity / unit:.0f} {unit_name}")
    ax.set(yticks=[], xlabel=unit_name, title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
