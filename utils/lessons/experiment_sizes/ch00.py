"""Chapter 00's full-size GPU work, for utils.lessons.time_model (chapter 00 has no experiment sizes of its own: it
reads chapter 01's step batch and picks its matmul sizes in the notebook)."""

from __future__ import annotations

from utils.lessons.experiment_sizes.ch01 import gpt_config
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops, matmul_flops


def work(tier: int) -> list[Work]:
    """Section 2's GPT-2-small step (step_peak: a warm-up and a measured step; step_peak_by_category: one more),
    the 8192 x 8192 matmul comparison (FP32 and BF16: a warm-up and 7 samples of at least 20 ms each) and the
    throughput widget's first reading (4096, FP32, 3 repeats)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    cfg = gpt_config("full")
    batch = pick(4, {16: 4, 24: 8, 40: 8, 80: 8}, size="full", tier=tier)
    n = 8192
    return [Work("GPT-2 small step (peak, by category)", gpt_step_flops(cfg, batch), 3, "fp32", ops=gpt_step_ops(cfg)),
            *(Work(f"{n} x {n} matmul, {p}", matmul_flops(n), 8, p, min_seconds=8 * 0.02) for p in ("fp32", "bf16")),
            Work("throughput widget (4096, FP32)", matmul_flops(4096), 3, "fp32")]
