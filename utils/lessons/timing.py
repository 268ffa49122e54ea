"""Timing that says where it was measured: CUDA events on a GPU, perf_counter (with torch.mps.synchronize) on
an Apple GPU, perf_counter on a CPU.

Warm-up runs first (kernel selection, caches, lazy initialisation), then the median of repeats. A GPU runs
kernels asynchronously: a call that takes microseconds is dominated by its launch overhead when timed alone, so
`inner` calls run between one pair of events (or clock reads) and the time is divided by `inner`.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from utils.validate import check_int, check_number


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
        from utils.lessons.env import default_device

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
        from utils.lessons.env import mps_available

        if not mps_available():
            raise ValueError("device is MPS but torch.backends.mps.is_available() is False")
    if dev.type not in ("cuda", "mps", "cpu"):
        raise ValueError(f"device must be a CUDA device, an Apple GPU (mps) or the CPU, got {dev}")
    return dev


def _current(dev: torch.device) -> Any:
    """A context in which `dev` is the current CUDA device (CUDA events and torch.accelerator.synchronize act on the
    current device's stream: a timing of cuda:1 from cuda:0 would time device 0), else nothing."""
    if dev.type == "cuda" and dev.index is not None:
        return torch.cuda.device(dev)
    return contextlib.nullcontext()


def time_fn(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 5, device: str | torch.device | None = None,
            inner: int = 1) -> Timing:
    """Time `fn()`: CUDA events when `device` is CUDA, perf_counter around torch.mps.synchronize() on an Apple
    GPU, perf_counter on a CPU (default device: `utils.lessons.env.default_device()`). Each sample times `inner`
    back-to-back calls between one pair of events and divides by `inner` (use inner > 1 for calls of a few
    microseconds, whose launch overhead would otherwise be what is measured)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_int("warmup", warmup, minimum=0)
    check_int("repeats", repeats, minimum=1)
    check_int("inner", inner, minimum=1)
    dev = _resolve_device(device)

    with _current(dev):  # events record on the current device's stream: make `dev` current (issue 33, bug 8)
        for _ in range(warmup):
            fn()
        samples = []
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(torch.cuda.current_stream(dev))
                for _ in range(inner):
                    fn()
                end.record(torch.cuda.current_stream(dev))
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3 / inner)
            return Timing(median_s=statistics.median(samples), samples_s=tuple(samples),
                          device=f"{torch.cuda.get_device_name(dev)} (CUDA events)")
    sync = torch.mps.synchronize if dev.type == "mps" else (lambda: None)  # the CPU or an Apple GPU
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


@dataclass(frozen=True)
class TimedConfig:
    """One configuration of a `compare_timings` call: its name and torch.utils.benchmark's `Measurement`
    (seconds per call: median and interquartile range over the repeats)."""

    name: str
    measurement: Any  # torch.utils.benchmark.Measurement

    @property
    def median_s(self) -> float:
        return self.measurement.median

    @property
    def iqr_s(self) -> float:
        return self.measurement.iqr

    @property
    def samples_s(self) -> tuple[float, ...]:
        return tuple(self.measurement.times)

    @property
    def low_high_s(self) -> tuple[float, float]:
        """The interquartile interval (25th and 75th percentile of the samples)."""
        return self.median_s - self.iqr_s / 2, self.median_s + self.iqr_s / 2


@dataclass(frozen=True)
class TimingTable:
    """Several configurations timed in one `compare_timings` call, at one size, on one device."""

    configs: tuple[TimedConfig, ...]
    device: str
    calls_per_sample: dict[str, int]

    def __getitem__(self, name: str) -> TimedConfig:
        for c in self.configs:
            if c.name == name:
                return c
        raise KeyError(f"no configuration named {name!r}; have {[c.name for c in self.configs]}")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.configs]

    def ratio(self, name: str, baseline: str) -> float:
        """Median time of `name` divided by the median time of `baseline`."""
        return self[name].median_s / self[baseline].median_s

    def distinct(self, a: str, b: str) -> bool:
        """True when the interquartile intervals of `a` and `b` do not overlap: the difference of the medians is
        larger than the spread of this run."""
        (lo_a, hi_a), (lo_b, hi_b) = self[a].low_high_s, self[b].low_high_s
        return hi_a < lo_b or hi_b < lo_a

    def reading(self, name: str, baseline: str) -> str:
        """One sentence comparing `name` with `baseline`, that follows this run's numbers and spread."""
        r = self.ratio(name, baseline)
        if not self.distinct(name, baseline):
            return (f"{name} and {baseline} are not distinguishable on this run ({r - 1:+.0%}, inside the "
                    "interquartile ranges)")
        if r >= 2:  # "11283% slower" reads badly (review s8b, G1): a ratio, as the faster branch gives
            return f"{name} is {r:.1f}x slower than {baseline}: it takes {r:.1f} times as long (outside both spreads)"
        if r > 1:
            return f"{name} is {r - 1:.0%} slower than {baseline} (outside both spreads)"
        return (f"{name} is {1 / r:.1f}x faster than {baseline}: it takes {1 - r:.0%} less time (outside both "
                "spreads)")

    def rows(self, baseline: str | None = None) -> list[tuple[str, str, str, int, str]]:
        """Table rows: name, median ms, IQR ms (and % of the median), samples, and the ratio to `baseline`."""
        base = self[baseline].median_s if baseline is not None else None
        out = []
        for c in self.configs:
            vs = f"{c.median_s / base - 1:+.0%}" if base else ""
            out.append((c.name, f"{c.median_s * 1e3:.2f}",
                        f"{c.iqr_s * 1e3:.2f} ({c.iqr_s / c.median_s:.0%})", len(c.samples_s), vs))
        return out

    def headers(self, baseline: str | None = None) -> list[str]:
        return ["configuration", f"median ms ({self.device})", "IQR ms (of median)", "samples",
                f"vs {baseline}" if baseline else ""]

    def show(self, baseline: str | None = None) -> None:
        """Display the table (Markdown in a notebook), with each configuration's spread."""
        from utils.lessons.tables import show_table

        show_table(self.rows(baseline), self.headers(baseline))


def _clock_label(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)}"
    return "Apple GPU (MPS)" if dev.type == "mps" else "CPU"


def compare_timings(configs: dict[str, Callable[[], Any]], *, repeats: int = 5, warmup: int = 1,
                    min_sample_s: float = 1e-3, device: str | torch.device | None = None,
                    progress: str | None = None) -> TimingTable:
    """Time several configurations in one call, at one size, with torch.utils.benchmark's clock and statistics.

    Each configuration is first called `warmup` times (kernel selection, caches, allocator warm-up, lazy init).
    Then `repeats` rounds run every configuration once each, in an order rotated every round, so that a change
    of load on a shared machine falls on all configurations alike. A sample is `n` back-to-back calls (n chosen
    from the warm-up so that a sample lasts at least `min_sample_s`) timed with `torch.utils.benchmark`'s
    `timer()`, which calls `torch.accelerator.synchronize()` before reading the clock (CUDA and MPS work is
    finished, not just queued); the samples go into a `torch.utils.benchmark.Measurement` (median, IQR).
    `progress`, if given, is the description of a tqdm bar printed to stdout."""

    if not isinstance(configs, dict) or not configs:
        raise TypeError("configs must be a non-empty dict of name -> callable")
    for name, fn in configs.items():
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"configs must map names (str) to callables, got {name!r}: {type(fn).__name__}")
    check_int("repeats", repeats, minimum=2)
    check_int("warmup", warmup, minimum=1)
    min_sample_s = check_number("min_sample_s", min_sample_s, minimum=0)
    if progress is not None and not isinstance(progress, str):
        raise TypeError(f"progress must be a str or None, got {type(progress).__name__}")
    dev = _resolve_device(device)

    with _current(dev):
        return _compare_timings(configs, repeats, warmup, min_sample_s, dev, progress)


def _compare_timings(configs: dict[str, Callable[[], Any]], repeats: int, warmup: int, min_sample_s: float,
                     dev: torch.device, progress: str | None) -> TimingTable:
    from torch.utils.benchmark import Measurement
    from torch.utils.benchmark.utils.common import TaskSpec
    from torch.utils.benchmark.utils.timer import timer

    names = list(configs)
    number = {}
    for name in names:  # warm-up; the last warm-up call also sizes the block of calls per sample
        for _ in range(warmup):
            t0 = timer()
            configs[name]()
            one = timer() - t0
        number[name] = max(1, min(10_000, math.ceil(min_sample_s / max(one, 1e-9))))
    raw: dict[str, list[float]] = {name: [] for name in names}
    bar = None
    if progress is not None:
        import sys

        from tqdm import tqdm

        bar = tqdm(total=repeats * len(names), desc=progress, file=sys.stdout, ncols=90, mininterval=1.0, delay=1.0)
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = configs[name], number[name]
            t0 = timer()
            for _ in range(n):
                fn()
            raw[name].append(timer() - t0)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    timed = tuple(TimedConfig(name, Measurement(number_per_run=number[name], raw_times=raw[name],
                                                task_spec=TaskSpec(stmt=name, setup="", label=name)))
                  for name in names)
    return TimingTable(timed, f"{_clock_label(dev)}, torch.utils.benchmark", number)
