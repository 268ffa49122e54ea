"""Chapter 09's sizes (capstone: fit a model into a budget).

The measured experiments run a small utils.lessons.models.GPT (the ledger's checks and the combination table), a GPT-2
built from a config with a LoRA adapter (the budgeted run), and torchao's optimizers and NF4 on CPU tensors (the
FSDP2 run on gloo processes is chapter 10's, utils/lessons/experiment_sizes/ch10.py). `footprints(tier)` predicts each
GPU experiment's peak with the chapter's own ledger (utils.ledger.plan.memory_of), with a margin of 1.5x for what the
ledger leaves out (Hugging Face GPT-2 keeps a few more tensors than the course's GPT; temporaries).
"""

from __future__ import annotations

from utils.ledger.gpt import TransformerShape
from utils.ledger.plan import Choice, memory_of
from utils.lessons.models import GPTConfig
from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work, gpt_step_flops, gpt_step_ops

MARGIN = 1.5
# The small GPT of the measured checks (quick: the lab's model; full: wider, still tiny for any GPU).
_FULL_GPT = {t: GPTConfig(n_layer=4, d_model=256, n_head=4, seq_len=256, vocab_size=1024) for t in TIERS}
SMALL_GPT = pick(GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256), _FULL_GPT,
                 tiny=GPTConfig(n_layer=1, d_model=32, n_head=2, seq_len=16, vocab_size=64))
SMALL_BATCH = pick(4, {16: 8, 24: 8, 40: 8, 80: 8}, tiny=2)
# The same at the full size on any GPU tier: what the committed GPU runs in results/ measured (a CPU run reads them).
FULL_SMALL_GPT, FULL_SMALL_BATCH = _FULL_GPT[80], 8
# GPT-2 from a config for the budgeted run (vocabulary 256: no tokenizer, no download).
_HF_BATCH = {16: 4, 24: 8, 40: 12, 80: 16}
HF_LAYERS = pick(2, {t: 12 for t in TIERS}, tiny=1)
HF_WIDTH = pick(64, {t: 768 for t in TIERS}, tiny=32)
HF_SEQ = pick(64, {t: 1024 for t in TIERS}, tiny=16)
HF_BATCH = pick(4, _HF_BATCH, tiny=2)
HF_STEPS = pick(15, {t: 100 for t in TIERS}, tiny=3)
# torchao's optimizer states and NF4 are measured on one CPU matrix of this shape (no GPU memory).
OPT_SHAPE = pick((512, 512), {t: (2048, 2048) for t in TIERS}, tiny=(128, 128))


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size GPU experiment of chapter 09 on a GPU of `tier` GiB."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    g = _FULL_GPT[tier]
    small = TransformerShape(g.n_layer, g.d_model, g.n_head, g.seq_len, g.vocab_size)
    small_peak = sum(memory_of(small, Choice(micro_batch=8)).values())
    hf = TransformerShape(12, 768, 12, 1024, 256)
    full_ft = sum(memory_of(hf, Choice(micro_batch=_HF_BATCH[tier])).values())
    return {"small GPT, FP32 step (ledger checks, combination table)": int(MARGIN * small_peak),
            "GPT-2 124M-like, full fine-tuning in FP32 (the reference run)": int(MARGIN * full_ft)}


def work(tier: int) -> list[Work]:
    """Chapter 09's full-size GPU work (utils.lessons.time_model): the budgeted GPT-2 run (HF_STEPS steps of the chosen
    plan, counted with checkpointing's extra forward and at the BF16 rate, emulated on a T4) and its unbudgeted
    reference step, and the small GPT's ledger checks and combination timings (about 12 configurations, 2 + 7
    steps each)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    hf = GPTConfig(n_layer=12, d_model=768, n_head=12, seq_len=1024, vocab_size=256)
    hf_step = gpt_step_flops(hf, _HF_BATCH[tier])
    forward = gpt_step_flops(hf, _HF_BATCH[tier], backward=False)
    small = gpt_step_flops(_FULL_GPT[tier], 8)
    ops = gpt_step_ops(hf)
    return [Work("budgeted GPT-2 run (with recomputation)", hf_step + forward, 100, "bf16",
                 ops=ops + gpt_step_ops(hf, backward=False)),
            Work("unbudgeted reference step", hf_step, 2, "fp32", ops=ops),
            Work("small GPT: ledger checks and combination timings", small, 12 * 9 + 20, "fp32",
                 ops=gpt_step_ops(_FULL_GPT[tier]))]
