"""Checks for lab 09 (capstone)."""

from __future__ import annotations

from collections.abc import Callable

from utils.checks.core import CheckFailed, Verdict, run_check
from utils.estimate import shape_of
from utils.models import GPTConfig
from utils.plan import Choice, memory_of, run_choice

LAB_CONFIG = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256)
LAB_BUDGET = 3 * 2**20
LAB_EFFECTIVE_BATCH = 16


def check_plan(make_plan: Callable[[GPTConfig, int, int], Choice]) -> Verdict:
    """Exercise 9.1: the learner's Choice keeps the effective batch, fits per the planner's estimate, and a real
    run of it stays under the budget and learns."""

    def body() -> None:
        choice = make_plan(LAB_CONFIG, LAB_BUDGET, LAB_EFFECTIVE_BATCH)
        if not isinstance(choice, Choice):
            raise CheckFailed("a utils.plan.Choice", type(choice).__name__, "return Choice(...).")
        if choice.micro_batch * choice.accumulation != LAB_EFFECTIVE_BATCH:
            raise CheckFailed(f"micro_batch x accumulation = {LAB_EFFECTIVE_BATCH}",
                              f"{choice.micro_batch} x {choice.accumulation}", "keep the effective batch.")
        if choice.sharding != "none" or choice.offload_optimizer:
            raise CheckFailed("a plan for one device", choice.describe(), "no sharding or offloading here.")
        estimate = sum(memory_of(shape_of(LAB_CONFIG), choice).values())
        if estimate > LAB_BUDGET:
            raise CheckFailed(f"an estimate within {LAB_BUDGET:,} B", f"{estimate:,} B ({choice.describe()})",
                              "checkpointing and smaller micro-batches shrink activations; see utils.plan.plan.")
        peak, losses = run_choice(LAB_CONFIG, choice, steps=6)
        if peak > LAB_BUDGET:
            raise CheckFailed(f"a measured peak within {LAB_BUDGET:,} B", f"{peak:,} B ({choice.describe()})",
                              "the estimate leaves out temporaries: plan with some margin (say 80% of the budget).")
        if not losses[-1] < losses[0]:
            raise CheckFailed("a loss that goes down", f"{losses[0]:.3f} -> {losses[-1]:.3f}",
                              "a plan must still train.")

    return run_check("9.1", body)
