"""Timing that says where it was measured: CUDA events on a GPU, perf_counter (with torch.mps.synchronize) on
an Apple GPU, perf_counter on a CPU.

Warm-up runs first (kernel selection, caches, lazy initialisation), then the median of repeats. A GPU runs
kernels asynchronously: a call that takes microseconds is dominated by its launch overhead when timed alone, so
`inner` calls run between one pair of events (or clock reads) and the time is divided by `inner`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from utils.validate import check_int


@dataclass(frozen=True)
class Timing:
    """Median seconds of `repeats` runs, with the clock and device that measured them."""

    median_s: float
    samples_s: tuple[float, ...]
    device: str  # e.g. "cpu (perf_counter)" or "NVIDIA H100 80GB HBM3 (CUDA events)"

    @property
    def label(self) -> str:
        return f"{self.median_s * 1e3:.3f} ms median of {len(self.samples_s)} on {self.device}"


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        from utils.env import default_device

        return default_device()
    if not isinstance(device, str | torch.device):
        raise TypeError(f"device must be a str, torch.device or None, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must name a device such as 'cpu', 'cuda' or 'mps', got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is CUDA but torch.cuda.is_available() is False")
    if dev.type == "mps":
        from utils.env import mps_available

        if not mps_available():
            raise ValueError("device is MPS but torch.backends.mps.is_available() is False")
    if dev.type not in ("cuda", "mps", "cpu"):
        raise ValueError(f"device must be a CUDA device, an Apple GPU (mps) or the CPU, got {dev}")
    return dev


def time_fn(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 5, device: str | torch.device | None = None,
            inner: int = 1) -> Timing:
    """Time `fn()`: CUDA events when `device` is CUDA, perf_counter around torch.mps.synchronize() on an Apple
    GPU, perf_counter on a CPU (default device: `utils.env.default_device()`). Each sample times `inner`
    back-to-back calls between one pair of events and divides by `inner` (use inner > 1 for calls of a few
    microseconds, whose launch overhead would otherwise be what is measured)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_int("warmup", warmup, minimum=0)
    check_int("repeats", repeats, minimum=1)
    check_int("inner", inner, minimum=1)
    dev = _resolve_device(device)

    for _ in range(warmup):
        fn()
    samples = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        label = f"{torch.cuda.get_device_name(dev)} (CUDA events)"
    else:
        sync = torch.mps.synchronize if dev.type == "mps" else (lambda: None)
        sync()
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            samples.append((time.perf_counter() - t0) / inner)
        label = "Apple GPU (MPS, perf_counter)" if dev.type == "mps" else "CPU (perf_counter)"
    return Timing(median_s=statistics.median(samples), samples_s=tuple(samples), device=label)


def matmul_tflops(n: int, dtype: torch.dtype = torch.float32, device: str | torch.device | None = None, *,
                  repeats: int = 5) -> tuple[float, Timing]:
    """Throughput of an n x n by n x n matmul in TFLOP/s (2 n^3 flops), with its timing."""
    check_int("n", n, minimum=1)
    check_int("repeats", repeats, minimum=1)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    dev = _resolve_device(device)
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
