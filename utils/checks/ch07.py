"""Checks for lab 07 (memory profiling)."""

from __future__ import annotations

from collections.abc import Callable

from utils.checks.core import Verdict, expect_equal, run_check
from utils.estimate import estimate_memory
from utils.models import GPT, GPTConfig, gpt_batch


def check_largest_batch(largest_batch: Callable[[GPT, int, int], int]) -> Verdict:
    """Exercise 7.1: the largest batch whose traced estimate fits a budget, for hidden models and budgets."""

    def fits(model: GPT, batch: int, budget: int) -> bool:
        return estimate_memory(model, gpt_batch(model.cfg, batch)).total <= budget

    def body() -> None:
        cases = [(GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=32, vocab_size=64), 6),
                 (GPTConfig(n_layer=2, d_model=48, n_head=4, seq_len=16, vocab_size=100), 3),
                 (GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=64, vocab_size=64), 0)]
        for cfg, target in cases:
            model = GPT(cfg)
            # A hidden budget between the estimates at `target` and `target + 1` (below batch 1's for target 0).
            above = estimate_memory(model, gpt_batch(cfg, target + 1)).total
            below = estimate_memory(model, gpt_batch(cfg, target)).total if target else above - 1024
            budget = (above + below) // 2
            expected = 0
            while fits(model, expected + 1, budget):
                expected += 1
            got = largest_batch(model, budget, 1024)
            expect_equal(got, expected, f"the largest batch under {budget:,} B for a {cfg.n_layer}-layer GPT "
                         f"(seq {cfg.seq_len})", hint="use estimate_memory(model, gpt_batch(model.cfg, b)).total <= "
                         "budget; return 0 when not even batch 1 fits; double, then bisect.")

    return run_check("7.1", body)
