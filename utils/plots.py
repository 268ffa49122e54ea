"""Figures the chapters share: a memory breakdown as a stacked bar against a capacity."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def memory_bar(parts: Mapping[str, int], capacity: int | None = None, title: str = "", unit: int = 2**30,
               unit_name: str = "GiB") -> Figure:
    """One horizontal stacked bar of `parts` (bytes), with the capacity as a vertical line."""
    if not parts or not all(isinstance(v, int) and v >= 0 for v in parts.values()):
        raise ValueError("parts must map names to non-negative byte counts (ints)")
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
