"""Held-out cases for lab 02 (number formats). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
signed zeros and subnormals, values that saturate, other weights and formats, other spreads, seeds,
magnitudes and FP8 formats than the public cases.
"""

from __future__ import annotations

import math

import torch

from utils.course.checks.ch02 import (
    ROUND_FORMATS,
    expect_block_quantize,
    expect_decode_fp16,
    expect_mx_elements,
    expect_round,
    expect_smallest_kept_update,
    expect_zero_fraction,
    log_uniform,
    round_cases,
)


def decode_cases(decode_fp16) -> None:
    """Negative zero and negative subnormals keep their sign (the public check compares values only)."""
    expect_decode_fp16(decode_fp16, [0x8000, 0x8001, 0x83FF, 0x8400, 0xFBFF, 0xFC00, 0x0001, 0x7BFF])


def round_cases_hidden(round_to_format) -> None:
    """FP16, BF16, an IEEE-style E4M3 (largest 240) and a 6-bit E3M2 (the public cases did E5M2 and TF32), other
    random values."""
    expect_round(round_to_format, [(round_cases(seed, 1500, *ROUND_FORMATS[name]), *ROUND_FORMATS[name])
                                   for seed, name in enumerate(("fp16", "bf16", "e4m3_ieee", "e3m2_ieee"), start=11)])


def kept_update_cases(smallest_kept_update) -> None:
    """Weights at and just below powers of two, other magnitudes, and weights that are subnormals."""
    expect_smallest_kept_update(smallest_kept_update, [(w, f) for f in ("fp16", "bf16", "fp32")
                                                       for w in (2.0, 1.9990234375, 1000.0, 0.3, 0.5, 7.0)])
    expect_smallest_kept_update(smallest_kept_update, [(1e-6, "fp16"), (2.0**-130, "fp32")])


def zero_fraction_cases(prediction, reasoning, fp8_zero_fraction) -> None:
    """The measuring function on other spreads and seeds, E5M2, tiny and huge magnitudes, tensors holding exact
    zeros, and a Gaussian weight (the prediction itself is graded by the public check, on a layer no one samples)."""
    expect_zero_fraction(fp8_zero_fraction, [(log_uniform(40_000, 30, 7), "e5m2"),
                                             (log_uniform(40_000, 40, 8, scale=1e-9), "e4m3"),
                                             (log_uniform(10_000, 20, 9, zeros=3000, scale=1e5), "e4m3"),
                                             (log_uniform(10_000, 8, 10), "e5m2"),
                                             (torch.randn(200, 300, generator=torch.Generator().manual_seed(4)) * 0.02,
                                              "e4m3")])


def block_quantize_cases(quantize_blocks, dequantize_blocks) -> None:
    """A 1-D tensor with a short last block, block 128 on a wide 2-D weight, an all-zero tensor, rows of tiny and
    huge magnitudes in E5M2, a negative amax in every block, and other seeds."""
    gen = torch.Generator().manual_seed(21)
    wide = torch.randn(6, 300, generator=gen) * (10.0 ** torch.arange(-3, 3)).unsqueeze(1)
    negative = -torch.rand(4, 64, generator=gen) * 5
    expect_block_quantize(quantize_blocks, dequantize_blocks,
                          [(torch.randn(70, generator=gen), "e4m3", 32), (wide, "e4m3", 128),
                           (torch.zeros(3, 40), "e4m3", 16), (wide * 1e3, "e5m2", 64), (negative, "e4m3", 16),
                           (torch.randn(2, 5, 33, generator=gen) * 1e-6, "e5m2", 8),
                           (torch.tensor([[math.pi, 0.0, -1e-3]]), "e4m3", 2)])


def mx_element_cases(decode_mx_element) -> None:
    """FP6 E2M3 (the public cases did FP4 E2M1 and FP6 E3M2), an all-finite 8-bit E4M3 and E5M2, and E3M0."""
    expect_mx_elements(decode_mx_element, [(2, 3), (4, 3), (5, 2), (3, 0)])


HIDDEN = {
    "2.1": decode_cases,
    "2.2": round_cases_hidden,
    "2.3": kept_update_cases,
    "2.4": zero_fraction_cases,
    "2.5": block_quantize_cases,
    "2.6": mx_element_cases,
}
