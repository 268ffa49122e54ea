"""Held-out cases for lab 05 (gradient checkpointing). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other depths, strides, widths, hidden multipliers, budgets, dropout and drop-path rates than the public cases.
"""

from __future__ import annotations

from utils.course.checks.ch05 import (
    expect_checkpointed_decoder,
    expect_fixed_checkpoint,
    expect_optimal_segments,
    expect_schedule,
    expect_swiglu,
    expect_vit_checkpoint,
)


def decoder_cases(checkpoint_decoder) -> None:
    """One block, one target token, a trained memory longer than the target, a deeper decoder, a wider one."""
    expect_checkpointed_decoder(checkpoint_decoder, [(1, 3, 1, 9, 8, True), (5, 2, 6, 3, 4, True),
                                                     (4, 1, 2, 12, 12, False), (2, 2, 3, 5, 24, True)])


def optimum_cases(prediction, reasoning, optimal_segments) -> None:
    """Other depths and block widths: a narrow block (c ~ 4), a deep wide one (c ~ 26), and two stacks narrow
    enough that LayerNorm's per-token statistics move the optimum (a formula in c alone misses both)."""
    expect_optimal_segments(optimal_segments, [(25, 1, 8, 8), (49, 12, 4, 8), (7, 4, 2, 4), (40, 1, 4, 1),
                                               (20, 1, 4, 2)])


def schedule_cases(plan_schedule) -> None:
    """A budget that fits everything, a budget just at the boundary, one block, checkpoints dearer than blocks."""
    expect_schedule(plan_schedule, [(20, 1000, 100, 10**9), (20, 1000, 100, 4 * 1000 + 5 * 100),
                                    (1, 1000, 100, 1000), (1, 1000, 100, 999), (6, 100, 300, 700),
                                    (30, 777, 61, 5000), (16, 100, 100, 1000)])


def fixed_checkpoint_cases(checkpointed_forward) -> None:
    """Other dropout rates (none, most), widths, token counts and seeds; two steps that evaluate between forward
    and backward (with no dropout, only BatchNorm's mode tells them apart)."""
    expect_fixed_checkpoint(checkpointed_forward, [(8, 4, 0.0, 5, True), (64, 8, 0.9, 6, False),
                                                   (3, 12, 0.5, 7, True)])


def swiglu_cases(swiglu_saved_bytes, choose_mode) -> None:
    """Budgets where nothing needs recomputing, where only full checkpointing fits, where nothing fits, and a
    Llama 3 70B MLP sub-block (d 8192, ffn 28672) at 8,192 tokens."""
    expect_swiglu(swiglu_saved_bytes, choose_mode, [(3, 64, 172, 10**6), (100, 32, 88, 30_000), (64, 8, 24, 100),
                                                    (8192, 8192, 28672, 5 * 10**9)])


def vit_checkpoint_cases(vit_forward) -> None:
    """No stochastic depth, a heavy one, one block, a deeper stack, other patch sizes, batches and seeds."""
    expect_vit_checkpoint(vit_forward, [(8, 4, 16, 1, 0.0, 2, 5), (12, 4, 24, 6, 0.6, 6, 6), (8, 2, 8, 2, 0.2, 3, 7)])


HIDDEN = {
    "5.1": decoder_cases,
    "5.2": optimum_cases,
    "5.3": schedule_cases,
    "5.4": fixed_checkpoint_cases,
    "5.5": swiglu_cases,
    "5.6": vit_checkpoint_cases,
}
