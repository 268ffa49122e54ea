"""Chapter 07's experiment sizes (memory profiling and out-of-memory debugging).

Full size is GPT-2 small's shape (124M parameters, 1,024 tokens) trained with AdamW in FP32, so that the snapshot
and the allocator's views show a realistic step: about 2 GiB of weights, gradients and Adam moments, plus about
0.8 GiB of activations per sequence. Footprints come from the course's analytic estimator
(`utils.ledger.gpt.transformer_memory`) plus the two transients it leaves out: the logits' gradient (4 bytes per
token per vocabulary entry) and the multi-tensor optimizer's temporaries (bounded by two more copies of the
parameters).
"""

from __future__ import annotations

from utils.ledger.gpt import TransformerShape, shape_of, transformer_memory
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick, tier_budget
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops

MIB = 2**20

# Batch of the steps profiled (allocator views, snapshot, profiler timeline).
STEP_BATCH = pick(8, {16: 4, 24: 8, 40: 8, 80: 8}, tiny=2)
# Batch of the planted leaks (three steps each: a kept validation graph per step).
LEAK_BATCH = pick(4, {16: 1, 24: 2, 40: 2, 80: 4}, tiny=1)
STEPS_LEAKED = 3
# Largest-batch search: the upper limit of the search (the search itself runs under a memory cap on a GPU). Quick:
# above the 86 the CPU's 64 MiB budget allows, and a probe of at most 128 real steps' batch where a GPU runs quick.
SEARCH_LIMIT = pick(4096, 128, tiny=64)
# CPU budget (bytes) for the search against the estimator; on a GPU the cap is the tier's budget.
CPU_SEARCH_BUDGET = 64 * MIB
# Fragmentation child process: pairs of an 8 MiB activation and a survivor (> 1 MiB, so the large pool), then
# growing requests of 12, 14, ... MiB.
FRAG_PAIRS = pick(40, 40, tiny=8)
FRAG_GROWING = pick(10, 10, tiny=3)
FRAG_SURVIVOR_BYTES = 3 * MIB // 2
# empty_cache demonstration: a freed block and a kept one.
CACHE_FREED_BYTES = 256 * MIB
CACHE_KEPT_BYTES = 64 * MIB


def gpt_config(size: str | None = None) -> GPTConfig:
    """The chapter's GPT for a size ('tiny', 'quick', 'full'; default: the current one). Quick (CPU) is a 2-layer
    toy, tiny (the simulated-GPU test) smaller still, full GPT-2 small's shape."""
    return GPTConfig(n_layer=pick(2, 12, tiny=1, size=size), d_model=pick(64, 768, tiny=32, size=size),
                     n_head=pick(4, 12, tiny=4, size=size), seq_len=pick(64, 1024, tiny=16, size=size),
                     vocab_size=pick(256, 50304, tiny=64, size=size))


def _step_bytes(shape: TransformerShape, batch: int) -> int:
    est = transformer_memory(shape, batch)
    logits_grad = 4 * batch * shape.seq_len * shape.vocab_size
    optimizer_temporaries = 2 * est.params
    return est.total + logits_grad + optimizer_temporaries


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size experiment of chapter 07 on a GPU of this tier."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    shape = shape_of(gpt_config("full"))
    step_batch = pick(8, {16: 4, 24: 8, 40: 8, 80: 8}, size="full", tier=tier)
    leak_batch = pick(4, {16: 1, 24: 2, 40: 2, 80: 4}, size="full", tier=tier)
    static = transformer_memory(shape, 1)
    static_bytes = static.params + static.grads + static.optimizer_states
    leaked_graphs = STEPS_LEAKED * transformer_memory(shape, leak_batch).activations
    return {
        "training steps, allocator views and snapshot": _step_bytes(shape, step_batch),
        "planted leaks (3 kept graphs, then 3 kept gradient sets)":
            max(_step_bytes(shape, leak_batch) + leaked_graphs, static_bytes + (STEPS_LEAKED + 1) * static.grads),
        # the search runs under set_per_process_memory_fraction at the tier's budget: it cannot pass it
        "largest-batch search (under a memory cap)": tier_budget(tier),
        "out-of-memory checklist on planted steps (under a memory cap)": tier_budget(tier),
        # every pair alive at once in 20 MiB segments, plus one segment per growing request (the default allocator)
        "fragmentation child process": (FRAG_PAIRS // 2 + 1) * 20 * MIB
        + sum((12 + 2 * j) * MIB for j in range(FRAG_GROWING)),
        "empty_cache demonstration": CACHE_FREED_BYTES + CACHE_KEPT_BYTES,
        # section 5's out-of-memory observer: capped at what is reserved (the steady-state step) + 1 GiB
        "out-of-memory observer (capped at reserved + 1 GiB)": _step_bytes(shape, step_batch) + 2**30,
    }


def work(tier: int) -> list[Work]:
    """Chapter 07's full-size GPU work (utils.lessons.time_model): the profiled GPT-2-small steps (about 8 at
    STEP_BATCH), the planted leaks (3 kept graphs and 3 kept gradient sets at LEAK_BATCH), the largest-batch search
    (about 10 probes, counted at twice STEP_BATCH) and the out-of-memory checklist (4 planted steps, one at 4 x
    STEP_BATCH)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    cfg = gpt_config("full")
    step_batch = pick(8, {16: 4, 24: 8, 40: 8, 80: 8}, size="full", tier=tier)
    leak_batch = pick(4, {16: 1, 24: 2, 40: 2, 80: 4}, size="full", tier=tier)
    step = gpt_step_flops(cfg, step_batch)
    ops = gpt_step_ops(cfg)
    probes = _search_probes(SEARCH_REACH[tier])
    return [Work("profiled training steps", step, 8, "fp32", ops=ops),
            Work("planted leaks", gpt_step_flops(cfg, leak_batch), 2 * STEPS_LEAKED + 2, "fp32", ops=ops),
            # each probe is one step at its batch (a failing one runs until its out-of-memory error: counted whole)
            Work(f"largest-batch search ({len(probes)} probes up to batch {max(probes)})",
                 gpt_step_flops(cfg, 1), sum(probes), "fp32", ops=ops * len(probes) // max(sum(probes), 1)),
            Work("out-of-memory checklist", step, 7, "fp32", ops=ops)]


# The batch chapter 07's search reaches under each tier's budget (issue 33: about 16 on a T4 and 128 on an H100;
# the tiers between by the budget: fixed part about 4 GiB, about 0.43 GiB per sequence of 1,024 tokens).
SEARCH_REACH: dict[int, int] = {16: 16, 24: 29, 40: 58, 80: 128}


def _search_probes(best: int, limit: int = 256) -> list[int]:
    """The batches utils.lessons.profiling.largest_fitting tries when `best` is the largest that fits (doubling from 1,
    then bisecting)."""
    from utils.lessons.profiling import largest_fitting

    tried: list[int] = []
    largest_fitting(lambda b: tried.append(b) or b <= best, limit=limit)
    return tried
