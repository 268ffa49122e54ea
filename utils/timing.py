"""Timing that says where it was measured: CUDA events on a GPU, perf_counter on a CPU.

Warm-up runs first (kernel selection, caches, lazy initialisation), then the median of repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Timing:
    """Median seconds of `repeats` runs, with the clock and device that measured them."""

    median_s: float
    samples_s: tuple[float, ...]
    device: str  # e.g. "cpu (perf_counter)" or "NVIDIA H100 80GB HBM3 (CUDA events)"

    @property
    def label(self) -> str:
        return f"{self.median_s * 1e3:.3f} ms median of {len(self.samples_s)} on {self.device}"


def time_fn(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 5, device: str | torch.device | None = None
            ) -> Timing:
    """Time `fn()`: CUDA events when `device` is CUDA (default: CUDA if available), else perf_counter."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for name, value, low in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if device is None:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif isinstance(device, str | torch.device):
        dev = torch.device(device)
    else:
        raise TypeError(f"device must be a str, torch.device or None, got {type(device).__name__}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is CUDA but torch.cuda.is_available() is False")
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be a CUDA device or the CPU, got {dev}")

    for _ in range(warmup):
        fn()
    samples = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        label = f"{torch.cuda.get_device_name(dev)} (CUDA events)"
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        label = "CPU (perf_counter)"
    return Timing(median_s=statistics.median(samples), samples_s=tuple(samples), device=label)


def matmul_tflops(n: int, dtype: torch.dtype = torch.float32, device: str | torch.device | None = None, *,
                  repeats: int = 5) -> tuple[float, Timing]:
    """Throughput of an n x n by n x n matmul in TFLOP/s (2 n^3 flops), with its timing."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    timing = time_fn(lambda: a @ b, repeats=repeats, device=dev)
    return 2 * n**3 / timing.median_s / 1e12, timing


def count_flops(fn: Callable[[], Any]) -> int:
    """Floating-point operations of `fn()` as torch's FlopCounterMode counts them (matmuls, convolutions,
    attention; elementwise ops are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()
