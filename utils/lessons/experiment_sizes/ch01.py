"""Chapter 01's experiment sizes (where the memory goes).

Full size is GPT-2 small's shape (124M parameters, 1,024 tokens) trained with AdamW in FP32: about 2 GiB of weights,
gradients and Adam moments plus about 0.75 GiB of activations per sequence, so the batch follows the GPU's memory
tier (4 sequences on a 16 GB T4). The other experiments (bytes per parameter of an MLP, activation curves, the
term-by-term block, Korthikanti's block, the estimator's validation) stay small at every size: what they show does
not need a large GPU. Footprints come from the course's analytic estimator (`utils.ledger.gpt.transformer_memory`)
plus what it leaves out: the logits' FP32 gradient (4 bytes per token per vocabulary entry) and the multi-tensor
optimizer's temporaries (bounded by two more copies of the parameters).
"""

from __future__ import annotations

from utils.ledger.gpt import TransformerShape, transformer_memory
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops

# Section 1: the training step, part by part.
N_LAYER = pick(2, 12, tiny=1)
D_MODEL = pick(64, 768, tiny=32)
N_HEAD = pick(4, 12, tiny=4)
SEQ_LEN = pick(64, 1024, tiny=16)
VOCAB = pick(256, 50304, tiny=64)
STEP_BATCH = pick(4, {16: 4, 24: 8, 40: 8, 80: 8}, tiny=2)
# Section 2: the MLP whose bytes per parameter are measured (hidden width, batch).
MLP_HIDDEN = pick(320, 2048)  # tiny as quick: small already, and the bytes per parameter need matmul-dominated layers
MLP_BATCH = pick(24, 256, tiny=4)
# Section 3: the block derived term by term (batch, sequence, width, heads); and Korthikanti's block.
BLOCK_SHAPE = pick((4, 64, 128, 4), (4, 64, 128, 4), tiny=(2, 16, 32, 4))
MEGATRON_SHAPE = pick((128, 2, 256, 4), (128, 2, 256, 4), tiny=(16, 1, 32, 4))  # s, b, h, a
# Section 4: activation curves (the longest sequence measured with eager attention).
CURVE_BATCHES = pick([1, 2, 4, 8, 16], [1, 2, 4, 8, 16], tiny=[1, 2, 4])
CURVE_SEQS = pick([32, 64, 128, 256, 512], [32, 64, 128, 256, 1024], tiny=[16, 32, 64])
CURVE_DEPTHS = pick([1, 2, 4, 8], [1, 2, 4, 8], tiny=[1, 2])
CURVE_WIDTHS = pick([32, 64, 128, 256], [32, 64, 128, 256], tiny=[32, 64])

# Section 6: the estimator against measured steps (a 2-layer GPT; each configuration costs two traced and two real
# steps, so the CPU runs four that cover precision, optimizer, checkpointing and batch; a GPU runs all eight).
_CONFIGS = [("fp32", "adamw", False, 4), ("fp32", "adamw", True, 4), ("fp32", "sgd", False, 4),
            ("fp32", "sgd", True, 8), ("fp32", "adamw", False, 16), ("bf16-mixed", "adamw", False, 4),
            ("bf16-mixed", "adamw", True, 4), ("bf16-mixed", "sgd", False, 8)]
VALIDATE_CONFIGS = [{"precision": p, "optimizer": o, "checkpointing": ck, "batch": b}
                    for p, o, ck, b in pick([_CONFIGS[i] for i in (0, 1, 4, 5)], _CONFIGS,
                                            tiny=[_CONFIGS[6]])]
# Section 6: the preset the fake-tensor tracer counts to show it needs no memory (tiny: none, to stay fast).
TRACE_PRESET = pick("7B", "7B", tiny=None)


def gpt_config(size: str | None = None) -> GPTConfig:
    """Section 1's GPT for a size ('tiny', 'quick', 'full'; default: the current one)."""
    return GPTConfig(n_layer=pick(2, 12, tiny=1, size=size), d_model=pick(64, 768, tiny=32, size=size),
                     n_head=pick(4, 12, tiny=4, size=size), seq_len=pick(64, 1024, tiny=16, size=size),
                     vocab_size=pick(256, 50304, tiny=64, size=size))


def _step_bytes(shape: TransformerShape, batch: int, precision: str = "fp32") -> int:
    est = transformer_memory(shape, batch, precision=precision)
    logits_grad = 4 * batch * shape.seq_len * shape.vocab_size
    optimizer_temporaries = 2 * est.params
    return est.total + logits_grad + optimizer_temporaries


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 01 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    cfg = gpt_config("full")
    shape = TransformerShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.seq_len, cfg.vocab_size)
    batch = pick(4, {16: 4, 24: 8, 40: 8, 80: 8}, size="full", tier=tier)
    hidden, mlp_batch = 2048, 256
    mlp_params = 96 * hidden + 2 * hidden * hidden + hidden * 40 + 3 * hidden + 40
    s, b, h, _a = pick((128, 2, 256, 4), (128, 2, 256, 4), size="full")
    return {
        # The step of section 1 (two steps in a row: the memory of the first is freed before the second).
        "training step (GPT, FP32 AdamW)": _step_bytes(shape, batch),
        # Bytes per parameter: FP32 or BF16-autocast MLP with AdamW (weights, grads, two moments, copies, activations).
        "MLP bytes per parameter": 22 * mlp_params + 4 * mlp_batch * (96 + 6 * hidden + 40),
        # The estimator's validation (2-layer GPT, d=64, T=64, batch <= 16): a few MiB.
        "validation": _step_bytes(TransformerShape(2, 64, 4, 64, 256), 16),
        # Activation curves: the largest is eager attention at T=1024, batch 4, 2 layers, d=64.
        "activation curves": _step_bytes(TransformerShape(2, 64, 4, 1024, 256), 4) + 2 * 4 * 4 * 1024 * 1024 * 4,
        # Korthikanti's block: s*b*h*(34 + 5*a*s/h) bytes plus its parameters, with room for backward.
        "Korthikanti block": 4 * (s * b * h * 40 + 6 * b * 4 * s * s) + 12 * h * h * 2,
    }


def work(tier: int) -> list[Work]:
    """Chapter 01's full-size GPU work (utils.lessons.time_model): section 1's two GPT-2-small steps; the estimator's
    validation (eight configurations, two traced and two real steps each, of a 2-layer GPT); the MLP and the
    activation curves are small."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    batch = pick(4, {16: 4, 24: 8, 40: 8, 80: 8}, size="full", tier=tier)
    small = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256)
    return [Work("GPT-2 small training steps (section 1)", gpt_step_flops(gpt_config("full"), batch), 2, "fp32",
                 ops=gpt_step_ops(gpt_config("full"))),
            Work("estimator validation (8 configurations x 4 steps)", gpt_step_flops(small, 16), 32, "fp32",
                 ops=gpt_step_ops(small))]
