"""Chapter 08's experiment sizes (FP8 and Transformer Engine).

Full-size experiments: a small GPT trained briefly to capture real tensors (section 1), the same GPT trained with
torchao's FP8 Linear layers (section 4), `torch._scaled_mm` against a BF16 matmul over square sizes (section 7),
and Transformer Engine's `te.Linear` / `te.TransformerLayer` in BF16 and FP8 (section 8). The FP8 sections run
only on GPUs of compute capability 8.9+ (L4 in the 24 GiB tier, L40S, H100), but every tier's footprint is checked.

`footprints` predicts each experiment's peak on a GPU: the course's analytic estimator (`transformer_memory`) for
the GPT, exact arithmetic for the matmuls, and a per-token count for Transformer Engine's layers (weights and
gradients in BF16, FP8 copies, and about 40 saved bytes per token and hidden unit, which bounds a BF16
TransformerLayer's saved activations; attention through its fused kernel, without the T x T scores).
"""

from __future__ import annotations

from utils.ledger.gpt import shape_of, transformer_memory
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import (
    Work,
    gpt_step_flops,
    gpt_step_ops,
    linear_stack_flops,
    linear_stack_ops,
    matmul_flops,
)


def gpt_config(size: str | None = None) -> GPTConfig:
    """The GPT whose tensors the chapter captures, for a size ('tiny', 'quick', 'full'; default: the current one)."""
    return GPTConfig(n_layer=2, d_model=pick(64, 512, tiny=32, size=size), n_head=4,
                     seq_len=pick(64, 256, tiny=16, size=size), vocab_size=256)


GPT_CFG = gpt_config()
GPT_BATCH = pick(8, 32, tiny=2)
GPT_STEPS = pick(20, 100, tiny=2)
FP8_TRAIN_STEPS = pick(8, 100, tiny=2)  # section 4: BF16 vs torchao FP8 training of the same GPT
SCALED_MM_SIZES_FULL = {16: (512, 1024, 2048, 4096, 8192), 24: (512, 1024, 2048, 4096, 8192),
                        40: (512, 1024, 2048, 4096, 8192, 16384), 80: (512, 1024, 2048, 4096, 8192, 16384)}
SCALED_MM_SIZES = pick((512, 1024, 2048), SCALED_MM_SIZES_FULL, tiny=(32,))
TE_HIDDEN = pick(1024, {16: 2048, 24: 4096, 40: 4096, 80: 4096}, tiny=128)
TE_TOKENS = pick(2048, {16: 4096, 24: 8192, 40: 8192, 80: 16384}, tiny=128)
TE_BATCH = 8  # Transformer Engine's inputs are (TE_TOKENS // TE_BATCH, TE_BATCH, TE_HIDDEN): sequence first


def _te_bytes(hidden: int, tokens: int) -> int:
    layer_params = 4 * hidden * hidden + 2 * hidden * 4 * hidden  # QKV + projection, and the MLP (4x)
    weights = 2 * layer_params * 2 + layer_params  # BF16 weights and gradients, FP8 copies
    return weights + 40 * tokens * hidden + 3 * 2 * tokens * hidden  # saved activations, input, output, its grad


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 08 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    shape = shape_of(gpt_config("full"))
    batch = pick(8, 32, size="full")
    est = transformer_memory(shape, batch, precision="fp32")
    logits_grad = 4 * batch * shape.seq_len * shape.vocab_size
    n = max(pick((512,), {t: SCALED_MM_SIZES_FULL[t] for t in TIERS}, size="full", tier=tier))
    hidden = pick(1024, {16: 2048, 24: 4096, 40: 4096, 80: 4096}, size="full", tier=tier)
    tokens = pick(2048, {16: 4096, 24: 8192, 40: 8192, 80: 16384}, size="full", tier=tier)
    return {"GPT training, tensors captured (and the torchao FP8 copy)": 2 * (est.total + logits_grad + 2 * est.params),
            "torch._scaled_mm vs BF16, largest size": n * n * (4 + 4 + 1 + 1 + 2 + 2 + 2),
            "Transformer Engine TransformerLayer, BF16 and FP8": _te_bytes(hidden, tokens)}


def work(tier: int) -> list[Work]:
    """Chapter 08's full-size GPU work (utils.lessons.time_model): the GPT trained for its tensors (FP32), the BF16 and
    torchao-FP8 training runs (emulated FP8 below 8.9 runs at the BF16/FP32 rate), and where FP8 Tensor Cores exist
    the torch._scaled_mm sweep (1 + 5 timed loops of 10 per size, against BF16) and Transformer Engine's layer
    (counted on every tier: the prediction is an upper bound where they are skipped)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    step = gpt_step_flops(gpt_config("full"), pick(8, 32, size="full"))
    hidden = pick(1024, {16: 2048, 24: 4096, 40: 4096, 80: 4096}, size="full", tier=tier)
    tokens = pick(2048, {16: 4096, 24: 8192, 40: 8192, 80: 16384}, size="full", tier=tier)
    te_layer = sum(linear_stack_flops(chain, tokens) for chain in  # QKV, projection, MLP
                   ([(hidden, 3 * hidden)], [(hidden, hidden)], [(hidden, 4 * hidden), (4 * hidden, hidden)]))
    sizes = SCALED_MM_SIZES_FULL[tier]
    ops = gpt_step_ops(gpt_config("full"))
    works = [Work("GPT trained for its tensors", step, pick(20, 100, size="full"), "fp32", ops=ops),
             Work("BF16 autocast training", step, pick(8, 100, size="full"), "bf16", ops=ops + ops // 4),  # casts
             # torchao's Float8Linear adds amax, scale and cast ops around each of the 4 x n_layer + 1 matmuls
             Work("torchao FP8 Linear training", step, pick(8, 100, size="full"), "fp8", ops=2 * ops)]
    works += [Work(f"scaled_mm and BF16 matmul at {n}", matmul_flops(n), 60, p) for n in sizes for p in ("fp8", "bf16")]
    works += [Work(f"Transformer Engine layer, {p}", te_layer, 7, p, ops=linear_stack_ops(5) + 60)
              for p in ("bf16", "fp8")]
    return works
