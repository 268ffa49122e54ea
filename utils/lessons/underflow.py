"""What happens to values cast to a low-precision dtype: how many become zero, subnormal, or overflow.

Chapter 03 measures real gradients with it at every loss scale; a widget calls `cast_outcomes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from utils.validate import check_instance, check_number

LOW_PRECISION = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


@dataclass(frozen=True)
class CastOutcomes:
    """Fractions of the nonzero input values, after scaling and casting."""

    zero: float  # flushed to zero: the information is gone
    subnormal: float  # kept with reduced precision
    overflow: float  # became inf/NaN (or, for E4M3, saturated at the largest value)
    normal: float
    count: int


def cast_outcomes(values: torch.Tensor, dtype: torch.dtype = torch.float16, scale: float = 1.0) -> CastOutcomes:
    """Cast `values * scale` to `dtype` and classify every nonzero value's fate.

    The same on every supported torch: an E4M3 value beyond 448 counts as overflow whether this torch's eager cast
    saturates it (torch >= 2.12) or turns it into NaN (before). For a large tensor pass a random sample (the
    fractions are unbiased): the values are copied to float64 on their device.
    """
    check_instance("values", values, torch.Tensor)
    if not values.is_floating_point():
        raise TypeError(f"values must be a floating-point torch.Tensor, got dtype {values.dtype}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in LOW_PRECISION:
        raise ValueError(f"dtype must be one of {LOW_PRECISION}, got {dtype!r}")
    scale = check_number("scale", scale, positive=True)
    x = values.detach().flatten().double()
    x = x[x != 0] * scale
    n = x.numel()
    if n == 0:
        return CastOutcomes(0.0, 0.0, 0.0, 0.0, 0)
    finfo = torch.finfo(dtype)
    cast = x.to(dtype).double()
    overflow = ~torch.isfinite(cast) | (cast.abs() >= finfo.max) & (x.abs() > finfo.max)
    zero = (cast == 0) & ~overflow
    subnormal = (cast.abs() < finfo.tiny) & ~zero & ~overflow
    counts = [int(m.sum()) for m in (zero, subnormal, overflow)]
    return CastOutcomes(counts[0] / n, counts[1] / n, counts[2] / n, (n - sum(counts)) / n, n)
