"""Experiment sizes: tiny (the simulated-GPU test), quick (CPU: each notebook in about a minute on 2 cores),
and full on a GPU, chosen for its memory tier so that a T4 runs every chapter without running out of memory.

The size follows the device unless the environment variable COURSE_SIZE forces it
(`COURSE_SIZE=quick` on a GPU for a fast pass; `COURSE_SIZE=full` on a CPU if you have time;
`COURSE_SIZE=tiny` is what the simulated-GPU test uses: it checks control flow, never figures).

A full-size value may depend on the GPU's memory: give `pick` a dict keyed by tier (16, 24, 40, 80 GiB:
T4; A10G/L4; A100-40GB; A100-80GB/H100 and larger). Every full-size experiment must fit in
`FIT_FRACTION` of its tier's usable memory (`TIER_USABLE_BYTES`); tests/test_tiers.py checks that with
the footprints each chapter declares in `utils/lessons/experiment_sizes/chNN.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, TypeVar

import torch

SIZE_ENV = "COURSE_SIZE"
TIER_ENV = "COURSE_TIER"  # force a memory tier (GiB: 16, 24, 40 or 80), e.g. to rehearse a T4 on an H100
Size = Literal["tiny", "quick", "full"]
SIZES: tuple[str, ...] = ("tiny", "quick", "full")
T = TypeVar("T")

GIB = 2**30
# Memory tiers by the GPUs a workshop rents. The usable bytes are what such a GPU reports as total memory
# (less than its marketed size: a T4 shows about 14.7 GiB, an A10G about 22.5 GiB, an L4 about 22 GiB).
TIERS: tuple[int, ...] = (16, 24, 40, 80)
TIER_USABLE_BYTES: dict[int, int] = {16: int(14.5 * GIB), 24: 22 * GIB, 40: 39 * GIB, 80: 79 * GIB}
# Where a tier starts: the least total memory a GPU must report to get it, well below the tier's usable bytes, so a
# card reporting a little less than the course's typical figure stays in its tier (issue 33, bug 6: the 24 GB tier
# started at 22 GiB, exactly the course's figure for an L4, and an H100's 79.1 GiB cleared the 80 GB tier by 0.1 GiB).
# Every full size fits FIT_FRACTION of the tier's usable bytes, which leaves room for the CUDA context and the
# workspaces even on a card at the tier's lower edge (20 GiB: a 16.5 GiB budget + about 0.6 GiB).
TIER_MIN_REPORTED_BYTES: dict[int, int] = {16: 0, 24: 20 * GIB, 40: 36 * GIB, 80: 72 * GIB}
TIER_EXAMPLES: dict[int, str] = {16: "T4", 24: "A10G / L4", 40: "A100-40GB", 80: "A100-80GB / H100"}
FIT_FRACTION = 0.75  # the rest is headroom: CUDA context, cuBLAS workspaces, allocator fragmentation


def experiment_size() -> Size:
    """'tiny', 'quick' or 'full': from COURSE_SIZE if set, else 'full' on CUDA and 'quick' elsewhere."""
    forced = os.environ.get(SIZE_ENV, "").strip().lower()
    if forced:
        if forced not in SIZES:
            raise ValueError(f"{SIZE_ENV} must be one of {', '.join(SIZES)}, got {forced!r}")
        size = forced
    else:
        size = "full" if torch.cuda.is_available() else "quick"
    if os.environ.get(TIER_ENV, "").strip():
        memory_tier()  # applies the tier's memory cap, whatever the size
    return size  # type: ignore[return-value]


def tier_for_memory(total_bytes: int) -> int:
    """The memory tier (GiB) of a GPU with `total_bytes` of memory: the largest tier it reaches
    (TIER_MIN_REPORTED_BYTES: a tier starts some GiB below its usable bytes, so no typical card sits on an edge).

    A GPU smaller than the smallest tier gets the smallest tier (16): full sizes are planned for a T4.
    """
    if isinstance(total_bytes, bool) or not isinstance(total_bytes, int):
        raise TypeError(f"total_bytes must be an int, got {type(total_bytes).__name__}")
    if total_bytes <= 0:
        raise ValueError(f"total_bytes must be positive, got {total_bytes}")
    fitting = [t for t in TIERS if TIER_MIN_REPORTED_BYTES[t] <= total_bytes]
    return max(fitting) if fitting else TIERS[0]


def tier_memory_fraction(tier: int, total_bytes: int) -> float:
    """The per-process memory fraction that leaves a GPU of `total_bytes` with the usable memory of `tier`
    (1.0 when the GPU is that small already)."""
    _check_tier(tier)
    if isinstance(total_bytes, bool) or not isinstance(total_bytes, int):
        raise TypeError(f"total_bytes must be an int, got {type(total_bytes).__name__}")
    if total_bytes <= 0:
        raise ValueError(f"total_bytes must be positive, got {total_bytes}")
    return min(1.0, TIER_USABLE_BYTES[tier] / total_bytes)


_CAPPED: dict[int, float] = {}  # device -> the fraction COURSE_TIER capped it at in this process


def memory_fraction_in_force(index: int | None = None) -> float:
    """The per-process memory fraction now in force on CUDA device `index` (default: the current device): what
    torch.cuda.get_per_process_memory_fraction reports (torch 2.9+), else the COURSE_TIER cap this process applied,
    else 1.0. A chapter that sets its own fraction restores THIS value afterwards, not 1.0 (issue 33, bug 2: a reset
    to 1.0 lifted the COURSE_TIER cap for the rest of the notebook)."""
    if index is not None:
        from utils.validate import check_int

        check_int("index", index, minimum=0)
    if not torch.cuda.is_available():
        return 1.0
    index = torch.cuda.current_device() if index is None else index
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if getter is not None:
        try:
            return float(getter(index))
        except (RuntimeError, AttributeError, AssertionError):  # a build without the binding
            pass
    return _CAPPED.get(index, 1.0)


def _cap_to_tier(tier: int) -> None:
    """COURSE_TIER rehearses a smaller GPU: cap this process's CUDA caching allocator at the tier's usable bytes
    (torch.cuda.set_per_process_memory_fraction caps the memory the allocator may reserve: total_memory x fraction;
    torch/cuda/memory.py). Applied at the first call, and again whenever the fraction in force has been raised
    above the tier's cap since (a chapter that reset it to 1.0); a chapter's own smaller cap is left alone."""
    if not torch.cuda.is_available():
        return
    index = torch.cuda.current_device()
    total = int(torch.cuda.get_device_properties(index).total_memory)
    fraction = tier_memory_fraction(tier, total)
    if not (tier_for_memory(total) > tier and fraction < 1.0):  # only a larger GPU rehearsing a smaller one
        return
    if index in _CAPPED and memory_fraction_in_force(index) <= fraction:
        return  # capped already, at the tier or below (a chapter's own cap)
    _CAPPED[index] = fraction
    torch.cuda.set_per_process_memory_fraction(fraction, index)


def memory_tier() -> int:
    """The tier of the current GPU: COURSE_TIER if set, else from the current CUDA device's total memory.

    COURSE_TIER on a larger GPU also caps this process at the tier's usable memory (a T4's on an H100 for
    COURSE_TIER=16), so the rehearsal runs out of memory where the smaller GPU would.
    Without CUDA (CPU, MPS) the smallest tier, 16: a full size forced there is planned for a T4.
    """
    forced = os.environ.get(TIER_ENV, "").strip()
    if forced:
        if forced not in {str(t) for t in TIERS}:
            raise ValueError(f"{TIER_ENV} must be one of {', '.join(map(str, TIERS))}, got {forced!r}")
        _cap_to_tier(int(forced))
        return int(forced)
    if not torch.cuda.is_available():
        return TIERS[0]
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return tier_for_memory(int(props.total_memory))


def tier_budget(tier: int) -> int:
    """Bytes a full-size experiment may use on a GPU of this tier: FIT_FRACTION of its usable memory."""
    _check_tier(tier)
    return int(FIT_FRACTION * TIER_USABLE_BYTES[tier])


def _check_tier(tier: object) -> int:
    if isinstance(tier, bool) or not isinstance(tier, int):
        raise TypeError(f"tier must be an int, one of {', '.join(map(str, TIERS))}; got {type(tier).__name__}")
    if tier not in TIER_USABLE_BYTES:
        raise ValueError(f"tier must be one of {', '.join(map(str, TIERS))}, got {tier!r}")
    return tier


def pick(quick: T, full: T | Mapping[int, T], *, tiny: T | None = None, size: Size | None = None,
         tier: int | None = None) -> T:
    """The value for the current experiment size (or for `size` when given).

    `full` is one value, or a dict {16: v, 24: v, 40: v, 80: v} chosen by the GPU's memory tier (or `tier`).
    `tiny` defaults to `quick`.
    """
    if size is None:
        size = experiment_size()
    if not isinstance(size, str) or size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)} or None, got {size!r}")
    if tier is not None:
        _check_tier(tier)
    if size == "tiny":
        return quick if tiny is None else tiny
    if size == "quick":
        return quick
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(map(str, TIERS))} or None, got {tier!r}")
    if isinstance(full, Mapping):
        missing = [t for t in TIERS if t not in full]
        if missing:
            raise ValueError(f"full must give a value for every tier {TIERS}; missing {missing}")
        return full[memory_tier() if tier is None else tier]
    return full
