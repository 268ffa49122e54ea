"""Chapter 06's experiment sizes (gradient accumulation), and what each full-size experiment needs per tier.

The footprints are arithmetic in FP32: parameters, gradients and AdamW's two states (16 bytes per parameter) plus
the activations of one micro-batch (Korthikanti et al.'s 34·s·b·h bytes per layer in 16-bit, doubled for FP32,
with SDPA attention: no s² term) and the logits with their softmax and gradient. The distributed demos run on the
CPU (gloo) at every size.
"""

from __future__ import annotations

from utils.lessons.models import GPTConfig
from utils.lessons.sizes import SIZES, TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops

FP32 = 4

# (n_layer, d_model, seq_len, vocab) of the GPT that shows the token-count pitfall, and its batch (sequences)
NORM_SHAPE: tuple[int, int, int, int] = pick((2, 32, 32, 64), (2, 256, 256, 64), tiny=(1, 16, 8, 16))
NORM_BATCH: int = pick(16, 64, tiny=8)
TRAIN_STEPS: int = pick(15, 200, tiny=3)  # optimizer steps of the drift experiment
ADAM_STEPS: int = pick(30, 200, tiny=3)  # steps of the Adam-without-/k experiment (a small MLP)
# the memory-vs-micro-batch experiment: (n_layer, d_model, seq_len, vocab) and the effective batch (sequences)
def mem_shape(size: str | None = None) -> tuple[int, int, int, int]:
    """(n_layer, d_model, seq_len, vocab) of the memory-vs-micro-batch GPT at `size` (default: the current size),
    so a notebook can rebuild the model of a saved run of another size."""
    if size is not None and size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)} or None, got {size!r}")
    return pick((2, 64, 64, 256), (4, 512, 512, 256), tiny=(1, 16, 8, 32), size=size)


MEM_SHAPE: tuple[int, int, int, int] = mem_shape()
EFFECTIVE: int = pick(32, 64, tiny=8)
MICRO_COUNTS: tuple[int, ...] = pick((1, 2, 4, 8), (1, 2, 4, 8, 16), tiny=(1, 2))


def _gpt_step_bytes(n_layer: int, d: int, seq: int, vocab: int, batch: int) -> int:
    params = n_layer * 12 * d * d + (vocab + seq) * d + vocab * d
    states = 4 * params * FP32  # parameters, gradients, AdamW's exp_avg and exp_avg_sq
    activations = n_layer * 2 * 34 * seq * batch * d
    logits = 3 * batch * seq * vocab * FP32  # logits, softmax, their gradient
    return states + activations + logits


def footprints(tier: int) -> dict[str, int]:
    """Peak bytes each full-size experiment of chapter 06 needs on a GPU of this memory tier (16, 24, 40, 80)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    n_layer, d, seq, vocab = (2, 256, 256, 64)
    ml, md, ms, mv = mem_shape("full")
    return {
        "token-count pitfall (big batch)": _gpt_step_bytes(n_layer, d, seq, vocab, 64),
        "memory vs micro-batch size (k = 1, the whole effective batch)": _gpt_step_bytes(ml, md, ms, mv, 64),
    }


def work(tier: int) -> list[Work]:
    """Chapter 06's full-size GPU work (utils.lessons.time_model): the token-count pitfall (3 methods x TRAIN_STEPS
    steps of the whole batch) and the memory-vs-micro-batch table (per k: one measured and 2 + 5 timed accumulation
    steps of the whole effective batch). The Adam experiment is a small MLP and the distributed demos run on CPU. Per k:
    a warm-up and a measured step (cuda_peak), then compare_timings' warm-up and 11 repeats: 14 steps, each k forwards
    and backwards (k x the ops) and one optimizer step."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    n_layer, d, seq, vocab = (2, 256, 256, 64)
    ml, md, ms, mv = mem_shape("full")
    norm_cfg = GPTConfig(n_layer=n_layer, d_model=d, n_head=4, seq_len=seq, vocab_size=vocab)
    mem_cfg = GPTConfig(n_layer=ml, d_model=md, n_head=4, seq_len=ms, vocab_size=mv)
    norm, mem = gpt_step_flops(norm_cfg, 64), gpt_step_flops(mem_cfg, 64)
    fwd_bwd = gpt_step_ops(mem_cfg, optimizer=False)
    optimizer = gpt_step_ops(mem_cfg) - fwd_bwd
    counts = pick((1, 2, 4, 8), (1, 2, 4, 8, 16), size="full")
    return [Work("token-count pitfall (3 methods)", norm, 3 * pick(15, 200, size="full"), "fp32",
                 ops=gpt_step_ops(norm_cfg))] + [
        Work(f"memory vs micro-batch size, k = {k} (14 steps)", mem, 14, "fp32", ops=k * fwd_bwd + optimizer)
        for k in counts]
