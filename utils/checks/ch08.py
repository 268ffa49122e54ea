"""Checks for lab 08 (FP8)."""

from __future__ import annotations

import random
from typing import Any

import torch

from utils.checks.core import CheckFailed, Verdict, run_check


class _ReferenceDelayedScaling:
    def __init__(self, fmax: float, history_len: int, margin: int, reduce: str) -> None:
        self.fmax, self.history_len, self.margin, self.reduce = fmax, history_len, margin, reduce
        self.history: list[float] = []

    def scale(self) -> float:
        if not self.history:
            return 1.0
        amax = max(self.history) if self.reduce == "max" else self.history[-1]
        return self.fmax / amax / 2**self.margin

    def update(self, amax: float) -> None:
        self.history = (self.history + [amax])[-self.history_len:]


def check_delayed_scaling(scaler_class: type) -> Verdict:
    """Exercise 8.1: scales from an amax history (max or most recent, with a margin) match the reference, and
    so does the quantization error of a tensor cast with them."""

    def body() -> None:
        rng = random.Random(8)
        fmax = torch.finfo(torch.float8_e4m3fn).max
        for history_len, margin, reduce in ((4, 0, "max"), (1, 1, "max"), (8, 2, "most_recent"), (3, 0, "most_recent")):
            ref = _ReferenceDelayedScaling(fmax, history_len, margin, reduce)
            yours: Any = scaler_class(fmax=fmax, history_len=history_len, margin=margin, reduce=reduce)
            for step in range(20):
                expected, got = ref.scale(), float(yours.scale())
                if abs(got - expected) > 1e-9 * expected:
                    raise CheckFailed(f"scale {expected:.6g} at step {step} (history {history_len}, margin {margin}, "
                                      f"{reduce})", f"{got:.6g}",
                                      "1.0 with an empty history; else fmax / amax / 2**margin, where amax is the "
                                      "max (or the last) of the last history_len amaxes.")
                t = torch.randn(256, generator=torch.Generator().manual_seed(step)) * rng.uniform(0.1, 50)
                q_ref = (t * expected).to(torch.float8_e4m3fn).float() / expected
                q_you = (t * got).to(torch.float8_e4m3fn).float() / got
                if not torch.equal(q_ref, q_you):
                    raise CheckFailed("the same quantized tensor", "a different one", "use the scale as computed.")
                amax = t.abs().max().item()
                ref.update(amax)
                yours.update(amax)

    return run_check("8.1", body)
