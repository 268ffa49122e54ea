"""Chapter 03's experiment sizes (loss scaling).

The chapter trains a small GPT in FP32, then keeps one step's gradients: every parameter's, and every Linear
layer's output gradient (retained with `retain_grad`). Only a random SAMPLE of the gradient values goes to the
host (drawn on the device, per tensor in proportion to its size), at every size: the fractions the chapter
reads are unbiased estimates, and the host never holds the whole set (at full size the activation gradients
alone are hundreds of millions of values).

`footprints` predicts the peak on a GPU with the course's analytic estimator (`transformer_memory`) plus what the
chapter keeps beyond a plain step: the retained Linear outputs and their gradients (kept alive by the hooks), a
copy of the FP32 parameter gradients, the logits' gradient, AdamW's multi-tensor temporaries (two parameter
copies) and the on-device sample.
"""

from __future__ import annotations

from utils.ledger.gpt import TransformerShape, shape_of, transformer_memory
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops

N_LAYER = pick(4, 12, tiny=1)
D_MODEL = pick(64, 512, tiny=32)
N_HEAD = pick(4, 8, tiny=4)
SEQ_LEN = pick(64, 256, tiny=16)
VOCAB = 256
BATCH = pick(8, 32, tiny=2)
TRAIN_STEPS = pick(12, 200, tiny=2)
SAMPLE = pick(200_000, 2_000_000, tiny=5_000)  # gradient values sampled for the host, at every size
ACCUM_MICRO_BATCHES = pick(4, 8, tiny=2)


def gpt_config(size: str | None = None) -> GPTConfig:
    """The chapter's GPT for a size ('tiny', 'quick', 'full'; default: the current one)."""
    return GPTConfig(n_layer=pick(4, 12, tiny=1, size=size), d_model=pick(64, 512, tiny=32, size=size),
                     n_head=pick(4, 8, tiny=4, size=size), seq_len=pick(64, 256, tiny=16, size=size),
                     vocab_size=VOCAB)


def _retained_output_bytes(shape: TransformerShape, batch: int) -> int:
    """Every Linear output (q/k/v 3d, projection d, MLP 4d and d, head V per token) and its gradient, FP32."""
    tokens = batch * shape.seq_len
    per_token = shape.n_layer * 9 * shape.d_model + shape.vocab_size
    return 2 * 4 * tokens * per_token


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 03 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    shape = shape_of(gpt_config("full"))
    batch = pick(16, 32, size="full")
    sample = pick(200_000, 2_000_000, size="full")
    est = transformer_memory(shape, batch)
    logits_grad = 4 * batch * shape.seq_len * shape.vocab_size
    step = est.total + logits_grad + 2 * est.params
    kept = _retained_output_bytes(shape, batch) + est.params + 3 * 8 * sample  # outputs, grad copy, sample
    return {"gradients of one step, kept and sampled": step + kept}


def work(tier: int) -> list[Work]:
    """Chapter 03's full-size GPU work (utils.lessons.time_model): the FP32 training run whose gradients are sampled,
    and the accumulation comparisons (a few optimizer steps of k micro-batches, each the whole batch)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    step = gpt_step_flops(gpt_config("full"), pick(8, 32, size="full"))
    ops = gpt_step_ops(gpt_config("full"))
    return [Work("FP32 training run (gradients sampled)", step, pick(12, 200, size="full"), "fp32", ops=ops),
            Work("accumulation with a scaler, right and wrong", step, 4, "fp32", ops=ops)]
