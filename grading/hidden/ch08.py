"""Held-out cases for lab 08 (FP8). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure: other
formats, margins, reductions, shapes, block sizes, tensors and GPUs than the public cases.
"""

from __future__ import annotations

import torch

from utils.course.checks.ch08 import (
    E4M3,
    E5M2,
    SPIKE,
    expect_delayed_runs,
    expect_fp8_plans,
    expect_mx_cases,
    expect_roundtrips,
)


def scale_cases(delayed_scaling_run) -> None:
    """most_recent on the public spike; E5M2 with a margin and a step of zeros (the scale is kept); a steady ramp
    (delayed scaling clips every step with margin 0); a history of one step; current scaling with zeros."""
    expect_delayed_runs(delayed_scaling_run, [
        (SPIKE, E4M3, 0, 4, "most_recent"),
        ({"steps": 8, "spike_at": 3, "spike": 300.0,
          "growth": 1.0, "seed": 2, "zero_at": 5}, E5M2, 1, 2, "most_recent"),
        ({"steps": 7, "spike_at": 0, "spike": 1.0, "growth": 1.5, "seed": 3}, E4M3, 0, 3, "max"),
        ({"steps": 9, "spike_at": 6, "spike": 64.0, "growth": 1.0, "seed": 4, "zero_at": 2}, E4M3, 2, 1, "max"),
        ({"steps": 6, "spike_at": 2, "spike": 1e4, "growth": 0.9, "seed": 5, "zero_at": 4}, E5M2, 0, 8, "current"),
        ({"steps": 12, "spike_at": 3, "spike": 1e4, "growth": 1.0, "seed": 6}, E5M2, 0, 5, "max")])


def mx_cases(prediction, reasoning, mx_quantize) -> None:
    """Blocks of 16 and 64, a wide spread of magnitudes, a 3-D tensor; both roundings."""
    expect_mx_cases(mx_quantize, [((32, 48), 16, 1, 20, "up"), ((8, 4, 64), 64, 2, 3, "floor"),
                                  ((128,), 32, 5, 40, "up"), ((32, 48), 16, 1, 20, "floor")])


def roundtrip_cases(fp8_roundtrip) -> None:
    """E5M2 gradients, a square matrix (where a per-column amax broadcasts without an error), a
    row of zeros among others, an all-negative matrix, 3-D activations with a negative outlier in one row."""
    g = torch.Generator().manual_seed(11)
    with_zero_row = torch.randn(16, 24, generator=g)
    with_zero_row[5] = 0.0
    acts = torch.randn(2, 8, 64, generator=g)
    acts[1, 3, 7] = -500.0
    expect_roundtrips(fp8_roundtrip, [("E5M2 gradients", torch.randn(40, 100, generator=g) * 1e-3, E5M2),
                                      ("a square matrix", torch.randn(32, 32, generator=g) * torch.logspace(
                                          -2, 2, 32).unsqueeze(1), E4M3),
                                      ("a matrix with a row of zeros", with_zero_row, E4M3),
                                      ("an all-negative matrix", -torch.rand(10, 50, generator=g) - 1.0, E4M3),
                                      ("3-D activations with a negative outlier", acts, E5M2),
                                      ("zeros", torch.zeros(4, 16), E4M3)])


def plan_cases(choose_fp8_recipe) -> None:
    """A100, consumer Blackwell (on TE 2.10, and on TE 2.4, before TE 2.6 refused MXFP8 there), B300, H200 with a new
    TE; releases before a recipe existed: L40S on TE 1.13 (only DelayedScaling), H100 on TE 2.1 (no
    Float8CurrentScaling yet), B200 on TE 2.0 (MXFP8's first release)."""
    expect_fp8_plans(choose_fp8_recipe, [("A100", (8, 0), (2, 9)), ("RTX 5090", (12, 0), (2, 10)),
                                         ("RTX 5090", (12, 0), (2, 4)), ("B300", (10, 3), (2, 10)),
                                         ("L40S", (8, 9), (1, 13)), ("H100", (9, 0), (2, 1)), ("B200", (10, 0), (2, 0)),
                                         ("H200", (9, 0), (3, 0))])


HIDDEN = {
    "8.1": scale_cases,
    "8.2": mx_cases,
    "8.3": roundtrip_cases,
    "8.4": plan_cases,
}
