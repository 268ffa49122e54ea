"""Chapter 04's experiment sizes (automatic mixed precision).

Full-size experiments: the five-precision GPT training (section 5), the square matmul timing (section 3), the
wide MLP measured in bytes per parameter (section 7, batch 2: parameters and optimizer states dominate) and the
fine-tuning drift experiment (section 6, kept on the CPU at every size). The small fixed probes (the op-dtype
GPT, the FP16-master vs torch.amp comparison, the custom Function) are the same at every size and negligible.

`footprints` predicts each experiment's peak on a GPU with the course's analytic estimator
(`transformer_memory`, FP32 being the largest precision) plus AdamW's multi-tensor temporaries (two parameter
copies), and exact arithmetic for the matmul and the MLP.
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
    """The GPT of section 5 for a size ('tiny', 'quick', 'full'; default: the current one)."""
    return GPTConfig(n_layer=pick(2, 12, tiny=1, size=size), d_model=pick(32, 768, tiny=16, size=size),
                     n_head=4, seq_len=pick(32, 512, tiny=8, size=size), vocab_size=pick(64, 8192, tiny=32, size=size))


TRAIN_CFG = gpt_config()
_TRAIN_BATCH = {16: 8, 24: 16, 40: 16, 80: 16}
# Sized by time as well as memory (utils.lessons.time_model, tests/test_time_model.py): on a T4 the FP32 and both BF16
# runs go at the FP32 rate (8.1 TFLOP/s: BF16 is emulated below 8.0), and 200 steps of each took 7-13 minutes there; 80
# steps are predicted at about 3 minutes (40% of peak), still long enough for the loss curves to separate.
_TRAIN_STEPS = {16: 80, 24: 200, 40: 200, 80: 200}
TRAIN_BATCH = pick(8, _TRAIN_BATCH, tiny=2)
TRAIN_STEPS = pick(20, _TRAIN_STEPS, tiny=3)
AMP_STEPS = pick(20, 100, tiny=3)  # section 4: FP32, FP16 weights + FP32 master, torch.amp (tiny GPT)
MATMUL_N = pick(256, 8192, tiny=32)
MLP_HIDDEN = pick(512, 4096, tiny=64)
DRIFT_DIM = pick(128, 1024, tiny=64)  # section 6 runs on the CPU at every size
DRIFT_STEPS = pick(100, 300, tiny=100)  # figures asserted at every size: as quick


def _mlp_params(hidden: int) -> int:
    """utils.lessons.models.mlp(256, hidden, 256, depth=2): 256->hidden, hidden->hidden, hidden->256, with biases."""
    return 256 * hidden + hidden + hidden * hidden + hidden + hidden * 256 + 256


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 04 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    shape = shape_of(gpt_config("full"))
    batch = pick(8, _TRAIN_BATCH, size="full", tier=tier)
    est = transformer_memory(shape, batch, precision="fp32")  # the largest of the five precisions
    logits_grad = 4 * batch * shape.seq_len * shape.vocab_size
    n = pick(256, 8192, size="full")
    mlp = _mlp_params(pick(512, 4096, size="full"))
    return {"five precisions, GPT training step (FP32 the largest)": est.total + logits_grad + 2 * est.params,
            "square matmul, FP32 operands and result": 3 * 4 * n * n,
            "bytes per parameter, wide MLP with AdamW (whole step)": 24 * mlp}


def work(tier: int) -> list[Work]:
    """Chapter 04's full-size GPU work (utils.lessons.time_model): section 5's GPT trained in every precision the GPU
    has (FP32, TF32 from 8.0, FP16 + GradScaler, BF16 autocast, pure BF16: BF16 runs at the FP32 rate on a T4), the
    matmul comparison (2 warm-up + 9 interleaved rounds per dtype), section 4's tiny GPT (3 schemes, then 5 seeds of 2)
    and the wide MLP's step."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    step = gpt_step_flops(gpt_config("full"), pick(8, _TRAIN_BATCH, size="full", tier=tier))
    steps = pick(20, _TRAIN_STEPS, size="full", tier=tier)
    n = pick(256, 8192, size="full")
    tiny = gpt_step_flops(GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=32, vocab_size=64), 8)
    hidden = pick(512, 4096, size="full")
    mlp_step = linear_stack_flops([(256, hidden), (hidden, hidden), (hidden, 256)], 2)
    # tier 16 is a T4 (7.5): no TF32 run there
    precisions = ("fp32", "fp16", "bf16", "bf16") if tier == 16 else ("fp32", "tf32", "fp16", "bf16", "bf16")
    # per precision: the training steps, one step under FlopCounterMode, one in step_peak, one FP32 forward
    ops = gpt_step_ops(gpt_config("full"))
    works = [Work(f"GPT training, {p}", step, steps + 2, p, ops=ops) for p in precisions]
    works += [Work("FP32 evaluation forwards", gpt_step_flops(gpt_config("full"), pick(8, _TRAIN_BATCH, size="full",
                                                                                     tier=tier), backward=False),
                   len(precisions), "fp32", ops=gpt_step_ops(gpt_config("full"), backward=False))]
    # compare_timings: 2 warm-up + 9 samples per dtype, each at least 20 ms of back-to-back calls
    works += [Work(f"{n} x {n} matmul, {p}", matmul_flops(n), 11, p, min_seconds=11 * 0.02)
              for p in ("fp32", "bf16", "fp16")]
    tiny_cfg = GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=32, vocab_size=64)
    works += [Work("tiny GPT, three schemes and five seeds", tiny, pick(20, 100, size="full") * 13, "fp16",
                   ops=gpt_step_ops(tiny_cfg) + 20),  # + GradScaler's unscale, inf check and update
              Work("wide MLP step (bytes per parameter)", mlp_step, 3, "bf16", ops=linear_stack_ops(3) + 40)]
    return works
