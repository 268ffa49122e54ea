"""Held-out cases for lab 10 (beyond one GPU). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure: other
layer sizes, depths, stages and micro-batches (fewer micro-batches than stages; one stage) for the pipeline, other
grouped-query shapes and refused degrees for the layer split, and other models, GPU counts, budgets and micro-batches
(one where nothing fits) for the layout, other sizes, GPU counts and stages for ZeRO's traffic, so that an answer
tuned to the public cases fails.
"""

from __future__ import annotations

from utils.course.checks.ch10 import (
    GIB,
    expect_fsdp2_traffic,
    expect_layout,
    expect_params_per_rank,
    expect_pipeline_stage,
)
from utils.ledger.budget import REPORTED_GIB, usable_budget


def pipeline_cases(pipeline_stage) -> None:
    """Fewer micro-batches than stages, one stage, a deep pipeline, odd sizes."""
    expect_pipeline_stage(pipeline_stage, [
        (7.0e8, 96, 8, 3, "1f1b"), (7.0e8, 96, 8, 3, "gpipe"), (1.5e9, 60, 1, 7, "1f1b"),
        (123_457.0, 48, 16, 64, "gpipe"), (123_457.0, 48, 16, 64, "1f1b")])


def params_cases(params_per_rank) -> None:
    """Llama-2-70B (64 heads, 8 key/value heads), Mistral-7B, multi-head attention (kv = heads); refused degrees."""
    expect_params_per_rank(params_per_rank, [
        (8192, 64, 8, 28672, 8), (8192, 64, 8, 28672, 4), (4096, 32, 8, 14336, 4), (2048, 16, 16, 5632, 16)],
        [(8192, 64, 8, 28672, 16), (4096, 32, 32, 11000, 16), (4096, 24, 8, 14336, 16)])


def layout_cases(choose_layout) -> None:
    """Another 70B GPU count and batch, a 7B model on 24 GB cards, a mixture of experts, and nothing fitting."""
    budget = {gpu: usable_budget(int(REPORTED_GIB[gpu] * GIB)) for gpu in REPORTED_GIB}
    expect_layout(choose_layout, [("Llama-2-70B", 64, budget["H100 (80 GB)"], 32),
                                  ("Mistral-7B", 16, budget["A10G (24 GB)"], 8),
                                  ("Mixtral-8x7B", 32, budget["A100 (80 GB)"], 16),
                                  ("Llama-3-8B", 8, budget["T4 (16 GB)"], 16)])


def fsdp2_traffic_cases(fsdp2_traffic) -> None:
    """Other sizes and GPU counts, both switches off, BF16 reductions, one micro-batch without sync, FP32 gathers."""
    expect_fsdp2_traffic(fsdp2_traffic, [
        (70_000_000_000, 2, 4, 512, 32, False, False), (13_000_000_000, 2, 2, 3, 1, True, False),
        (999_999_937, 4, 4, 7, 64, False, True), (125_000_000, 2, 4, 64, 8, True, True),
        (8_000_000_000, 2, 2, 16, 4, False, False)])


HIDDEN = {"10.1": pipeline_cases, "10.2": params_cases, "10.3": layout_cases, "10.4": fsdp2_traffic_cases}
