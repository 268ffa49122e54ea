"""Chapter 05's experiment sizes (gradient checkpointing), and what each full-size experiment needs per tier.

Full size uses LLM-like token counts: thousands of tokens per micro-batch through blocks of width 768-1024 (at 64
tokens, checkpointing saves almost nothing that matters on a GPU). The footprints are exact arithmetic in FP32:
parameters (4 bytes each), gradients where there is a backward, and the activations a block saves (about
10 x tokens x width floats: LayerNorm input and output, the 4x-wide up-projection and GELU outputs), with a
block's temporaries on top.
"""

from __future__ import annotations

from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops, linear_stack_flops, linear_stack_ops
from utils.validate import check_int

FP32 = 4
SAVED_PER_BLOCK = 10  # floats per token per block the stack's Block saves for backward (measured in the notebook)

_WIDTH = {16: 768, 24: 768, 40: 1024, 80: 1024}
_TOKENS = {16: 2048, 24: 4096, 40: 4096, 80: 8192}
_TRADE = {16: (256, 2048), 24: (256, 4096), 40: (512, 4096), 80: (512, 8192)}
_DEPTHS = [4, 9, 16, 36, 64, 100]
_ATTN_SEQS = [64, 128, 256, 512, 4096]
_HF = {16: (12, 768, 1024, 2), 24: (12, 768, 1024, 4), 40: (12, 768, 1024, 8), 80: (12, 768, 1024, 8)}

WIDTH: int = pick(64, _WIDTH, tiny=16)  # d: width of the stack's blocks
TOKENS: int = pick(256, _TOKENS, tiny=8)  # tokens per micro-batch through the stack (rows of x)
DEPTHS: list[int] = pick([4, 9, 16, 36, 64, 100], _DEPTHS, tiny=[4, 9, 16])
OPT_DEPTH: int = pick(64, 64, tiny=16)  # the depth at which the optimum number of segments is found
TRADE_DEPTH: int = pick(16, 16, tiny=4)  # blocks in the batch-vs-recomputation experiment
TRADE_TOKENS: tuple[int, int] = pick((8, 512), _TRADE, tiny=(2, 4))  # small and large base micro-batch (tokens)
HF_SHAPE: tuple[int, int, int, int] = pick((4, 64, 128, 2), _HF, tiny=(1, 32, 16, 1))  # layers, width, seq, batch
ATTN_SEQS: list[int] = pick([64, 128, 256, 512, 1024], _ATTN_SEQS, tiny=[16, 32, 64])
GROWTH = 6  # the larger batch in the trade-off is at most this many times the base one


def _stack_params(depth: int, d: int) -> int:
    return depth * (8 * d * d + 7 * d) * FP32  # up (d x 4d) and down (4d x d) with biases, LayerNorm


def _saved(depth: int, d: int, tokens: int) -> int:
    return depth * SAVED_PER_BLOCK * tokens * d * FP32


def sweep_bytes(depth: int, d: int, tokens: int) -> int:
    """Peak bytes of section 1's saved-bytes sweep (notebook cell 7) at its deepest stack: the cell builds one stack
    at a time and frees it before the next depth (so one stack's parameters, never the six stacks'), plus the saved
    activations of the forward being measured (with LayerNorm's mean and 1/std: 2 floats per token per block), its
    input and its output. tests/test_tiers_measured.py measures the cell at the quick size against this."""
    for name, value in (("depth", depth), ("d", d), ("tokens", tokens)):
        check_int(name, value, minimum=1)
    layer_norm_stats = depth * 2 * tokens * FP32
    return _stack_params(depth, d) + _saved(depth, d, tokens) + layer_norm_stats + 2 * tokens * d * FP32


def footprints(tier: int) -> dict[str, int]:
    """Peak bytes each full-size experiment of chapter 05 needs on a GPU of this memory tier (16, 24, 40, 80)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    d, tokens = _WIDTH[tier], _TOKENS[tier]
    block_temp = 2 * 4 * tokens * d * FP32  # one block's widest temporaries (4d wide) during backward
    depth = max(_DEPTHS)
    small, large = _TRADE[tier]
    layers, hd, seq, batch = _HF[tier]
    gpt2_params = 124_000_000 * FP32
    # Korthikanti et al.'s per-layer activations, 34 s b h + 5 a s^2 b bytes in 16-bit, doubled for FP32 (4 heads)
    gpt2_acts = layers * 2 * (34 * seq * batch * hd + 5 * 4 * seq * seq * batch)
    attn_seq = max(_ATTN_SEQS)
    return {
        "saved bytes vs depth (forward only, no checkpointing)": sweep_bytes(depth, d, tokens),
        "training step at the optimum depth, no checkpointing":
            2 * _stack_params(OPT_DEPTH, d) + _saved(OPT_DEPTH, d, tokens) + block_temp,
        "batch vs recomputation (larger batch, one checkpoint per block)":
            2 * _stack_params(TRADE_DEPTH, d) + TRADE_DEPTH * GROWTH * large * d * FP32
            + _saved(1, d, GROWTH * large) + 2 * 4 * GROWTH * large * d * FP32,
        "batch vs recomputation (base batch, no checkpointing)":
            2 * _stack_params(TRADE_DEPTH, d) + _saved(TRADE_DEPTH, d, large) + block_temp,
        "GPT-2 forward (saved bytes)": gpt2_params + gpt2_acts,
        # batch 2, 4 heads: scores, softmax and masks of T x T, and the output's gradient
        "one attention layer at the longest sequence (eager)": 4 * 2 * 4 * attn_seq * attn_seq * FP32,
        "batch vs recomputation (small base batch)": 2 * _stack_params(TRADE_DEPTH, d)
            + _saved(TRADE_DEPTH, d, GROWTH * small),
        # C22 in the claims cell: a 100-block stack with its gradients, 20 segments (20 inputs + 5 blocks' activations)
        "C22: 100 blocks, 20 checkpoints": 2 * _stack_params(depth, d) + 20 * tokens * d * FP32
            + _saved(depth // 20, d, tokens) + block_temp,
        # the checkpointing widget dragged to its extreme (100 blocks, 1 segment: nothing recomputed) by a learner
        "checkpointing widget at 100 blocks, 1 segment": 2 * _stack_params(depth, d) + _saved(depth, d, tokens)
            + block_temp,
    }


def work(tier: int) -> list[Work]:
    """Chapter 05's full-size GPU work (utils.lessons.time_model), as forward passes of one stack block (16 T d^2 FLOPs,
    a backward being two more, a recomputation one more): the saved-bytes sweep (4 strategies, forward only, every
    depth), the optimum search (two steps with recomputation per distinct k = ceil(N/L)), the recomputation
    timings (4 configurations, 2 warm-up + 5 rounds), the batch-vs-recomputation timings (both base batches, the
    larger at up to GROWTH x), the offload timing, and GPT-2's forward."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    d, tokens = _WIDTH[tier], _TOKENS[tier]
    block = linear_stack_flops([(d, 4 * d), (4 * d, d)], tokens, backward=False)  # one block's forward
    ks = len({-(-OPT_DEPTH // n) for n in range(1, OPT_DEPTH + 1)})
    small, large = _TRADE[tier]
    trade = sum(TRADE_DEPTH * 4 * linear_stack_flops([(d, 4 * d), (4 * d, d)], t * (1 + GROWTH), backward=False)
                for t in (small, large))
    layers, hd, seq, batch = _HF[tier]
    # ops: a block is 2 Linear + GELU (about 8 ops forward, 16 backward, 8 more recomputed); offload adds copies
    block_ops = linear_stack_ops(2, backward=False) + 2
    hf = GPTConfig(n_layer=layers, d_model=hd, n_head=12, seq_len=seq, vocab_size=50257)
    return [Work("saved bytes vs depth (4 strategies, forward)", block, 4 * sum(_DEPTHS), "fp32", ops=block_ops),
            Work("optimum segments (2 steps per k, recomputed)", block * OPT_DEPTH * 4, 2 * ks, "fp32",
                 ops=4 * OPT_DEPTH * block_ops),
            Work("recomputation timings (4 configurations)", block * OPT_DEPTH * 4, 4 * 7, "fp32",
                 ops=4 * OPT_DEPTH * block_ops),
            Work("batch vs recomputation timings", trade, 7, "fp32", ops=2 * 4 * TRADE_DEPTH * block_ops),
            Work("offload and plain step timings", block * OPT_DEPTH * 3, 14, "fp32", ops=5 * OPT_DEPTH * block_ops),
            Work("checkpoint_sequential and C22 steps (recomputed)", block * 4, 2 * OPT_DEPTH + max(_DEPTHS), "fp32",
                 ops=4 * block_ops),
            Work("GPT-2 forward (saved bytes)", gpt_step_flops(hf, batch, backward=False), 2, "fp32",
                 ops=gpt_step_ops(hf, backward=False))]
