"""Held-out cases for lab 04 (automatic mixed precision). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure: other
dtypes, widths, clipping norms, scales, seeds and GPUs than the public cases, so that an answer tuned to those cases
fails.
"""

from __future__ import annotations

import torch

from utils.course.checks.ch04 import (
    expect_bytes_per_param,
    expect_clipped_step,
    expect_recipes,
    expect_scorer_dtypes,
    expect_training_states,
)
from utils.lessons.models import GPT, GPTConfig, cnn, mlp


def autocast_dtype_cases(autocast_dtypes) -> None:
    """Autocast to FP16 over FP32 inputs, and inputs already in the autocast dtype (BF16, FP16)."""
    expect_scorer_dtypes(autocast_dtypes, [(torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16),
                                           (torch.float16, torch.float16)])


def bytes_per_param_cases(prediction, reasoning, bytes_per_param) -> None:
    """FP32, FP32 with BF16 autocast (weight copies), pure FP16, at other widths."""
    expect_bytes_per_param(bytes_per_param, [(256, torch.float32, None), (384, torch.float32, torch.bfloat16),
                                             (256, torch.float16, None)])


def clipped_step_cases(train_step) -> None:
    """One micro-batch, four, a clip that always bites, a loose clip, a huge initial scale (overflow and skip
    first), other widths and seeds."""
    expect_clipped_step(train_step, [(32, 1, 0.05, 2.0**10, 3, 4), (64, 4, 50.0, 2.0**16, 2, 3),
                                     (32, 2, 0.3, 2.0**24, 4, 5)])


def recipe_cases(choose_recipe) -> None:
    """V100, P100, A10G, L4, B200 and a consumer Blackwell, with models that fit in FP32, only in pure BF16, in
    neither, and exactly at the budget."""
    gib = 2**30
    expect_recipes(choose_recipe, [("V100", (7, 0), 1_000_000_000, 32 * gib), ("V100", (7, 0), 3_000_000_000, 32 * gib),
                                   ("P100", (6, 0), 300_000_000, 16 * gib), ("P100", (6, 0), 2_000_000_000, 16 * gib),
                                   ("A10G", (8, 6), 2_000_000_000, 24 * gib), ("L4", (8, 9), 7_000_000_000, 24 * gib),
                                   ("B200", (10, 0), 11_000_000_000, 180 * gib),
                                   ("RTX 5090", (12, 0), 2 * gib, 32 * gib), ("RTX 5090", (12, 0), 4 * gib, 32 * gib)])


def training_state_cases(training_state_bytes) -> None:
    """A CNN, plain RMSprop in FP32, SGD in pure BF16, AdamW under AMP, Adagrad with a frozen layer."""
    frozen = mlp(8, 24, 4, depth=3)
    frozen[2].requires_grad_(False)
    expect_training_states(training_state_bytes, [
        ("a CNN", cnn(4, 3, 8), "rmsprop", "fp32"),
        ("a CNN", cnn(4, 3, 8), "sgd", "pure-bf16"),
        ("a GPT", GPT(GPTConfig(n_layer=2, d_model=16, n_head=2, seq_len=8, vocab_size=30)), "adamw", "amp-bf16"),
        ("a deeper MLP with a frozen layer", frozen, "adagrad", "pure-bf16"),
    ])


HIDDEN = {
    "4.1": autocast_dtype_cases,
    "4.2": bytes_per_param_cases,
    "4.3": clipped_step_cases,
    "4.4": recipe_cases,
    "4.5": training_state_cases,
}
