"""Two experiment sizes: quick on CPU (each notebook in about a minute on 2 cores), full on CUDA.

The size follows the device unless the environment variable COURSE_SIZE forces it
(`COURSE_SIZE=quick` on a GPU for a fast pass; `COURSE_SIZE=full` on a CPU if you have time).
"""

from __future__ import annotations

import os
from typing import Literal, TypeVar

import torch

SIZE_ENV = "COURSE_SIZE"
Size = Literal["quick", "full"]
T = TypeVar("T")


def experiment_size() -> Size:
    """'quick' or 'full': from COURSE_SIZE if set, else 'full' on CUDA and 'quick' elsewhere."""
    forced = os.environ.get(SIZE_ENV, "").strip().lower()
    if forced:
        if forced not in ("quick", "full"):
            raise ValueError(f"{SIZE_ENV} must be 'quick' or 'full', got {forced!r}")
        return forced  # type: ignore[return-value]
    return "full" if torch.cuda.is_available() else "quick"


def pick(quick: T, full: T, size: Size | None = None) -> T:
    """The value for the current experiment size (or for `size` when given)."""
    if size is None:
        size = experiment_size()
    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick', 'full' or None, got {size!r}")
    return quick if size == "quick" else full
