"""Held-out cases for lab 03 (loss scaling). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other gradient distributions, scales, tolerances, overflow schedules, growth intervals, seeds and schedulers.
"""

from __future__ import annotations

import torch

from utils.course.checks.ch03 import (
    binade_counts,
    expect_flushed,
    expect_format_plans,
    expect_loop,
    expect_scaler,
    expect_window,
    log_normal_grads,
)


def flushed_cases(prediction, reasoning, fraction_flushed) -> None:
    """The measuring function on other distributions and scales, a 2-D tensor, and values at exactly half the
    smallest subnormal (ties); the prediction itself is graded by the public check (an 8-billion-gradient case)."""
    ties = torch.full((100,), 2.0**-25) * torch.tensor([1.0, -1.0]).repeat(50)
    expect_flushed(fraction_flushed, [(log_normal_grads(30_000, -24, 5, 11), 1.0),
                                      (log_normal_grads(30_000, -30, 2, 12).reshape(300, 100), 2.0**12),
                                      (ties, 1.0), (log_normal_grads(1000, -5, 1, 13), 2.0**20)])


def scaler_cases(scaler_class) -> None:
    """Overflows on the clipping steps themselves, back-to-back overflows, growth interval 1, other seeds."""
    expect_scaler(scaler_class, [(15, {0, 1, 6}, {0, 1, 2, 3, 4, 5, 6, 9}, 2.0**16, 2, 5),
                                 (9, {3, 4}, {4, 5, 8}, 2.0**4, 1, 6), (8, set(), set(range(8)), 2.0**12, 4, 7)])


def window_cases(scale_window) -> None:
    """Other models and censuses: a ViT-like model whose layers agree (a wide window), a model with an empty layer
    and a spread no FP16 scale covers (None), a census starting at another binade, a strict and a loose tolerance."""
    vit = {"patch_embed": (590_592, -20.0, 2.0), "qkv": (1_769_472, -22.0, 2.0), "mlp": (4_718_592, -21.0, 2.0),
           "head": (768_000, -18.0, 2.0)}
    moe = {"router": (32_768, -12.0, 2.0), "expert_0": (176_160_768, -30.0, 4.0), "expert_7": (176_160_768, -34.0, 4.0),
           "shared": (58_720_256, -26.0, 3.0)}
    split = {"norm": (4096, -6.0, 1.0), "embed": (525_336_576, -44.0, 3.0)}
    empty = binade_counts(vit, -50, 60)
    empty = torch.cat([empty, torch.zeros(1, 60, dtype=torch.int64)])
    expect_window(scale_window, [(binade_counts(vit, -50, 60), -50, 1e-4), (binade_counts(moe, -70, 80), -70, 0.01),
                                 (binade_counts(moe, -70, 80), -70, 0.05), (binade_counts(split, -70, 80), -70, 1e-3),
                                 (empty, -50, 0.0)])


def loop_cases(train_loop) -> None:
    """Overflows at the end (in a last, shorter group of 5), in every group, none at all with a loose max_norm (only
    the mean over micro-batches changes the weights), no accumulation, a LambdaLR schedule, and groups of 5, 5, 2."""
    expect_loop(train_loop, [({11}, "lambda", 2, 7, 1.0), ({0, 4, 8}, "step", 3, 4, 0.3), (set(), "step", 4, 2, 50.0),
                             ({0, 1, 2}, "lambda", 5, 1, 1.0), ({5}, "step", 6, 6, 5.0), (set(), "step", 7, 5, 50.0)])


def format_plan_cases(format_plan) -> None:
    """E5M2 with no loss tolerated, FP16 gradients so large that the scale must go below 1, BF16 with tiny
    gradients, and a spread no FP16 scale covers (None)."""
    expect_format_plans(format_plan, [(log_normal_grads(20_000, -8, 2, 32), 0.0, "fp8_e5m2"),
                                      (log_normal_grads(20_000, -8, 2, 32) * 2.0**30, 0.001, "fp16"),
                                      (log_normal_grads(5000, -40, 2, 33), 0.05, "bf16"),
                                      (log_normal_grads(20_000, -10, 12, 34), 0.0, "fp16")])


HIDDEN = {
    "3.1": flushed_cases,
    "3.2": scaler_cases,
    "3.3": window_cases,
    "3.4": loop_cases,
    "3.5": format_plan_cases,
}
