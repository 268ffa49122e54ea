"""Chapter 02's experiment sizes (number formats).

The chapter's experiments are small at every size: a 2-layer GPT whose tensors are captured for the FP8 and
block-scaling comparisons, a sample of random doubles for the double-rounding count, and one square matmul for
the throughput table. `footprints` counts their bytes exactly (float32 tensors), with the estimator for the GPT.
"""

from __future__ import annotations

from utils.ledger.gpt import TransformerShape, transformer_memory
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops, matmul_flops

GPT_D_MODEL = pick(64, 256, tiny=32)
GPT_SEQ_LEN = pick(32, 128, tiny=16)
GPT_STEPS = pick(20, 100, tiny=2)
ACT_BATCH = pick(8, 32, tiny=2)
QUANT_SAMPLE = pick(2**14, 2**18, tiny=2**10)  # values per tensor kind for the quantisation comparisons
DOUBLE_ROUNDING_SAMPLES = pick(100_000, 1_000_000, tiny=10_000)
MATMUL_N = pick(128, 8192, tiny=64)


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 02 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    d, t, b = pick(64, 256, size="full"), pick(32, 128, size="full"), pick(8, 32, size="full")
    shape = TransformerShape(2, d, 4, t, 256)
    step = transformer_memory(shape, b).total + 4 * b * t * 256 + 2 * shape.n_params
    # captured Linear inputs and grad_outputs (each 9d wide per token in total, plus the head) and the weights
    captured = 2 * 4 * b * t * (2 * 9 * d + 256) + 4 * shape.n_params
    n = pick(128, 8192, size="full")
    return {"FP8 tensors of a small GPT": step + captured, "matmul throughput": 3 * 4 * n * n}


def work(tier: int) -> list[Work]:
    """Chapter 02's full-size GPU work (utils.lessons.time_model): the small GPT trained for its tensors, and the matmul
    throughput table (blocked_autorange: at least 0.5 s per format; FP32, BF16, FP16, TF32)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    cfg = GPTConfig(n_layer=2, d_model=pick(64, 256, size="full"), n_head=4, seq_len=pick(32, 128, size="full"),
                    vocab_size=256)
    n = pick(128, 8192, size="full")
    return [Work("small GPT trained for its tensors", gpt_step_flops(cfg, pick(8, 32, size="full")),
                 pick(20, 100, size="full"), "fp32", ops=gpt_step_ops(cfg))] + [
        Work(f"{n} x {n} matmul throughput, {p}", matmul_flops(n), 3, p, min_seconds=0.5)
        for p in ("fp32", "bf16", "fp16") + (() if tier == 16 else ("tf32",))]  # tier 16: a T4, no TF32
