"""Held-out cases for lab 09 (capstone). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other model sizes, ZeRO stages, GPU counts and optimizers, other LoRA ranks and shapes, other vocabularies and
numbers of evaluation batches for the fine-tuning script, other budgets and effective batches for the plan, and
other token counts, chunks and padding for the chunked loss, so that an answer tuned to the public cases fails.
"""

from __future__ import annotations

from utils.course.checks.ch09 import (
    LAB_CONFIG,
    expect_chunked_loss,
    expect_finetune,
    expect_lora_counts,
    expect_model_states,
    expect_plan,
)
from utils.lessons.models import GPTConfig


def model_states_cases(model_state_bytes) -> None:
    """No sharding over many GPUs (nothing divides), stage 1 at 64 GPUs with 8-bit moments, stage 3 at 2, an odd
    count."""
    expect_model_states(model_state_bytes, [
        (13_000_000_000, 0, 16, "adamw8bit"), (13_000_000_000, 1, 64, "adamw8bit"), (125_000_000, 3, 2, "adamw8bit"),
        (999_999_937, 2, 3, "adamw"), (70_000_000_000, 3, 512, "adamw"), (46_700_000_000, 1, 8, "adamw")])


def lora_prediction_cases(prediction, reasoning, count_trainable) -> None:
    """Other depths, widths and ranks: the measurement must count any configuration."""
    expect_lora_counts(count_trainable, [
        (GPTConfig(n_layer=3, d_model=32, n_head=2, seq_len=16, vocab_size=64), 4),
        (GPTConfig(n_layer=1, d_model=96, n_head=4, seq_len=8, vocab_size=32), 16)])


def finetune_cases(finetune) -> None:
    """A larger vocabulary with more evaluation batches, and a wider model with a smaller one."""
    expect_finetune(finetune, [(8192, 16, 2, 6, 1), (2048, 48, 4, 3, 2)])


def plan_cases(make_plan) -> None:
    """A tighter budget with a smaller effective batch, and another model."""
    expect_plan(make_plan, LAB_CONFIG, int(2.5 * 2**20), 8)
    expect_plan(make_plan, GPTConfig(n_layer=3, d_model=48, n_head=4, seq_len=48, vocab_size=128), 2 * 2**20, 12)


def chunked_loss_cases(chunked_loss) -> None:
    """A token count that is not a multiple of the chunk, no padding, a larger vocabulary, heavy padding."""
    expect_chunked_loss(chunked_loss, [(1000, 32, 4096, 96, 0, 1), (768, 48, 16384, 64, 3, 2)])


HIDDEN = {"9.1": model_states_cases, "9.2": lora_prediction_cases, "9.3": finetune_cases, "9.4": plan_cases,
          "9.5": chunked_loss_cases}
