"""Held-out cases for lab 06 (gradient accumulation). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other micro-batch counts, seeds, all-padding micro-batches, model sizes, epsilons, gradient distributions, loss
scales, auxiliary-loss weights and budgets.
"""

from __future__ import annotations

from utils.course.checks.ch06 import (
    expect_micro_plan,
    expect_moe_accumulation,
    expect_params_changed,
    expect_token_normalised,
    expect_weighted_accumulation,
)
from utils.lessons.models import GPTConfig


def token_cases(accumulate) -> None:
    """k = 1, one sequence per micro-batch, and a micro-batch made only of padding."""
    expect_token_normalised(accumulate, [(1, 5, 3, 0), (6, 6, 4, 0), (3, 9, 5, 3)])


def adam_cases(prediction, reasoning, params_changed) -> None:
    """A 70B model at k = 64 with a larger eps, a 1% change, k = 1 (nothing changes), a change Adam can never reach
    (at most k times larger), and gradients far above eps."""
    expect_params_changed(params_changed, [(70.6e9, 64, 1e-6, -5.5, 1.5, 0.25), (1e9, 8, 1e-8, -7.0, 0.7, 0.01),
                                           (1e6, 1, 1e-8, -9.0, 1.0, 0.1), (1e6, 4, 1e-8, -9.0, 1.0, 3.5),
                                           (5e8, 32, 1e-8, -3.0, 0.8, 0.05)])


def amp_cases(moe_accumulation_step) -> None:
    """One micro-batch, an overflowing micro-batch (every optimizer's step skipped, scale halved), a tight clip, a
    small scale, a large auxiliary weight."""
    expect_moe_accumulation(moe_accumulation_step, [(1, 2.0**16, 1.0, 0.01, 2, False), (3, 2.0**16, 1.0, 0.01, 3, True),
                                                    (4, 2.0**8, 0.01, 0.05, 4, False), (6, 4.0, 10.0, 1.0, 5, False)])


def plan_cases(choose_micro_batches) -> None:
    """Eager attention (T x T terms), a prime batch, a budget that fits everything."""
    eager = GPTConfig(n_layer=1, d_model=16, n_head=2, seq_len=32, vocab_size=32, attention="eager")
    deep = GPTConfig(n_layer=3, d_model=24, n_head=4, seq_len=8, vocab_size=50)
    expect_micro_plan(choose_micro_batches, [(eager, 8, 150_000), (deep, 7, 60_000), (deep, 6, 10**9)])


def weighted_cases(accumulate_weighted) -> None:
    """k = 8 with one micro-batch whose labels are all ignored, many classes, k = 1."""
    expect_weighted_accumulation(accumulate_weighted, [(8, 16, 4, 2, 2), (3, 12, 10, 3, 5), (1, 6, 3, 4, 1)])


HIDDEN = {
    "6.1": token_cases,
    "6.2": adam_cases,
    "6.3": amp_cases,
    "6.4": plan_cases,
    "6.5": weighted_cases,
}
