"""A plan's configuration run for real, and drawn: what chapter 09 and lab 09 need torch (or matplotlib) for.

`utils.ledger.plan` counts the bytes of a `Choice` without torch; `run_choice` trains `utils.lessons.models.GPT` as the
Choice says and meters the step's peak (`utils.lessons.measure.step_peak`), the measurement the ledger is checked
against (tests/test_real_steps.py); `time_choice` times it; `plan_figure` draws a plan's steps as stacked bars
(`utils.ledger.plan.figure_bars` gives the numbers, which the course website's planner page draws too).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F

from utils.ledger.plan import OPTIMIZERS, Choice, Plan, figure_bars
from utils.lessons.env import default_device
from utils.lessons.measure import step_peak
from utils.lessons.models import GPT, GPTConfig, gpt_batch
from utils.lessons.timing import time_fn
from utils.validate import check_choice, check_instance, check_int, check_number


def _no_compile(fn: Any = None, **_: Any) -> Any:
    """torch.compile's stand-in while a torchao optimizer steps, on every device: the same step function, run eagerly
    (compiling it takes about a minute on a small CPU and changes no byte of state, but an eager step runs many small
    kernels per tensor: its time is an upper bound on the compiled step torchao's users run)."""
    return fn if fn is not None else (lambda f: f)


def make_optimizer(name: str, params: Any, lr: float) -> Any:
    """AdamW from torch, or torchao's AdamW8bit / AdamW4bit."""
    check_choice("name", name, OPTIMIZERS)
    check_number("lr", lr, positive=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    from torchao.optim import AdamW4bit, AdamW8bit

    return (AdamW8bit if name == "adamw8bit" else AdamW4bit)(params, lr=lr)


@dataclass
class _Prepared:
    """A model, its optimizer and the step functions of one `Choice` (see `run_choice`)."""

    model: Any
    opt: Any
    micro_step: Any  # (inputs, targets) -> loss: forward and backward of one micro-batch, gradients accumulate
    last_micro_batch: Any  # the last micro-batch and the update, gradients cleared
    optimizer_step: Any  # every micro-batch and the update -> mean loss
    no_compile: Any  # a context manager: torchao's step runs eagerly inside it
    inputs: Any  # the optimizer step's token ids and targets
    targets: Any


def _prepare(cfg: Any, choice: Choice, seed: int) -> _Prepared:
    check_instance("cfg", cfg, GPTConfig)
    check_instance("choice", choice, Choice)
    check_int("seed", seed, minimum=0)
    if choice.sharding != "none" or choice.offload_optimizer or choice.quantize_base:
        raise ValueError("run_choice runs one process on one device: no sharding, offload or NF4 base")
    if choice.lora_targets != "attention":
        raise ValueError("run_choice adapts the attention only (qkv and proj)")
    device = default_device()
    torch.manual_seed(seed)
    model = GPT(replace(cfg, checkpointing=choice.checkpointing)).to(device)
    bf16_base = bool(choice.lora_rank) or choice.precision == "bf16"
    if choice.lora_rank:
        import warnings

        from peft import LoraConfig, inject_adapter_in_model

        model = model.to(torch.bfloat16)  # the frozen base in BF16, as memory_of assumes
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # "qkv" and "proj" match attn.qkv and attn.proj only: the MLP's layers are mlp.0 and mlp.2
            model = inject_adapter_in_model(LoraConfig(r=choice.lora_rank, lora_alpha=2 * choice.lora_rank,
                                                       target_modules=["qkv", "proj"]), model)
        for name, p in model.named_parameters():
            p.requires_grad = "lora_" in name
            if p.requires_grad:
                p.data = p.data.float()  # FP32 adapters
    elif choice.precision == "bf16":
        model = model.to(torch.bfloat16)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(choice.optimizer, trainable, lr=3e-3)
    use_autocast = choice.precision == "bf16-mixed" or bool(choice.lora_rank)
    x, y = gpt_batch(cfg, choice.micro_batch * choice.accumulation, device=device, seed=seed)
    no_compile = mock.patch.object(torch, "compile", _no_compile) if choice.optimizer != "adamw" else nullcontext()

    def micro_step(xs: torch.Tensor, ys: torch.Tensor) -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_autocast):
            logits = model(xs)
            if bf16_base:
                logits = logits.float()  # the loss in FP32, as memory_of assumes for a BF16 base
            # inside the region, as torch.amp's recipe has it: autocast runs the loss's log-softmax in FP32
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys.reshape(-1))
        del logits  # not kept through backward (the loss saved what it needs): Hugging Face's Trainer drops them too
        (loss / choice.accumulation).backward()
        return loss.item()

    def last_micro_batch() -> None:
        try:
            micro_step(x[-choice.micro_batch:], y[-choice.micro_batch:])
            opt.step()
        finally:
            opt.zero_grad(set_to_none=True)

    def optimizer_step() -> float:
        try:
            parts = [micro_step(xs, ys) for xs, ys in zip(x.chunk(choice.accumulation),
                                                          y.chunk(choice.accumulation), strict=True)]
            opt.step()
        finally:
            opt.zero_grad(set_to_none=True)
        return sum(parts) / len(parts)

    return _Prepared(model, opt, micro_step, last_micro_batch, optimizer_step, no_compile, x, y)


def run_choice(cfg: Any, choice: Choice, steps: int = 10, seed: int = 0) -> tuple[int, list[float]]:
    """Train `utils.lessons.models.GPT(cfg)` for `steps` optimizer steps as `choice` says (precision, checkpointing,
    micro-batches and accumulation, optimizer, LoRA on the attention's qkv and proj through peft), and measure
    the peak of one optimizer step with `utils.lessons.measure.step_peak` (a CUDA peak on a GPU, MemTracker on a CPU;
    with accumulation, the peak of a micro-batch after the first, whose gradients are alive throughout, and of
    the update). Returns (peak bytes, the loss of each optimizer step). Sharding, offload and NF4 bases need
    several processes, a host copy or a CUDA kernel and are not run here (ValueError)."""
    check_int("steps", steps, minimum=1, maximum=10_000)
    run = _prepare(cfg, choice, seed)
    with run.no_compile:
        if choice.accumulation == 1:
            peak = step_peak(run.last_micro_batch, run.model, run.opt)
        else:  # the step's peak is in a later micro-batch, with the accumulated gradients alive throughout
            run.optimizer_step()  # creates the optimizer's state
            run.micro_step(run.inputs[: choice.micro_batch], run.targets[: choice.micro_batch])
            peak = step_peak(run.last_micro_batch, run.model, run.opt, warmup=0)
        losses = [run.optimizer_step() for _ in range(steps)]
    return peak, losses


def time_choice(cfg: Any, choice: Choice, *, warmup: int = 2, repeats: int = 5, seed: int = 0) -> Any:
    """The time of one optimizer step of `choice` (as `run_choice` trains it), after `warmup` steps, over
    `repeats` steps: a `utils.lessons.timing.Timing` (median and every sample)."""
    run = _prepare(cfg, choice, seed)
    with run.no_compile:
        return time_fn(run.optimizer_step, warmup=warmup, repeats=repeats)


def plan_figure(p: Plan, title: str = "") -> Any:
    """One horizontal stacked bar per step of `p` (the ledger after each technique, in GiB, the same lines in the
    same colours on every bar) against a line at the usable budget, labelled with the figure the text prints
    (`{budget / GIB:.1f}` GiB). When the first bars are many times the budget (a real model's whole batch), the
    left panel draws them at full scale, where the lines each technique shrinks are seen shrinking, and a right
    panel zooms to 2.5 x the budget, where the last steps are compared with it (a longer bar is cut there and its
    total written at the edge); otherwise one panel. The legend sits below the axes, clear of the axis labels."""
    import matplotlib.pyplot as plt  # here, not at import: a grading child that imports the planner draws nothing

    check_instance("p", p, Plan)
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    bars = figure_bars(p)
    steps, lines, budget, panels = bars["steps"], bars["lines"], bars["budget_gib"], bars["panels"]
    palette = plt.get_cmap("tab20")
    colours = {k: palette(i) for k, i in bars["colours"].items()}
    # compact: beside its controls, with its printed lines and cost table, it fits a 900-pixel-high window
    fig, axes = plt.subplots(1, len(panels), figsize=(7 if len(panels) == 1 else 8, 1.4 + 0.3 * len(steps)),
                             sharey=True, squeeze=False)
    for ax, (kind, limit) in zip(axes[0], panels, strict=True):
        for row, (_, parts) in enumerate(steps):
            left = 0.0
            for k in lines:
                width = parts.get(k, 0.0)
                if width > 0:
                    ax.barh(row, width, left=left, color=colours[k])
                    left += width
            if left > limit:
                ax.text(limit, row, f" {left:,.0f} GiB", va="center", ha="right", fontsize=7,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        ax.axvline(budget, color="black", linestyle="--", linewidth=1.2)
        ax.set_xlim(0, limit)
        ax.set_xlabel(f"GiB per GPU, full scale\n(dashed: usable budget {budget:.1f} GiB)" if kind == "full" else
                      f"GiB per GPU, zoomed to\n2.5 x the budget ({budget:.1f} GiB)" if len(panels) > 1 else
                      f"GiB per GPU (dashed: usable budget {budget:.1f} GiB)", fontsize=8 if len(panels) > 1 else 10)
    first = axes[0][0]
    first.set_yticks(range(len(steps)), [label for label, _ in steps], fontsize=8)
    first.invert_yaxis()
    fig.suptitle(title, fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in lines]
    legend = fig.legend(handles, lines, loc="lower center", ncol=4, fontsize=7, frameon=False)
    # the axes end above the legend as drawn (its rows, however many lines the plan has), plus a small gap
    fig.tight_layout(rect=(0, legend.get_window_extent().height / fig.bbox.height + 0.01, 1, 1))
    return fig
