"""Checks for lab 06 (gradient accumulation)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from utils.checks.core import CheckFailed, Verdict, run_check
from utils.models import GPT, GPTConfig


def _padded(n: int, cfg: GPTConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (n, cfg.seq_len), generator=g)
    y = (x + 1) % cfg.vocab_size
    lengths = torch.randint(1, cfg.seq_len + 1, (n,), generator=g)
    y[torch.arange(cfg.seq_len) >= lengths[:, None]] = -100
    return x, y


def check_token_normalised(accumulate: Callable[..., None]) -> Verdict:
    """Exercise 6.1: accumulated gradients over padded micro-batches equal the big batch's token-mean gradient."""

    def body() -> None:
        cfg = GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=12, vocab_size=40)
        for k, n, seed in ((4, 8, 0), (2, 6, 1), (3, 9, 2)):
            torch.manual_seed(seed)
            model = GPT(cfg)
            reference = copy.deepcopy(model)
            x, y = _padded(n, cfg, seed)
            logits = reference(x)
            F.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1), ignore_index=-100).backward()
            micro_batches = list(zip(x.chunk(k), y.chunk(k), strict=True))
            accumulate(model, micro_batches)
            for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
                if p.grad is None:
                    raise CheckFailed(f"a gradient for {name}", "None", "call backward() on each micro-batch's loss.")
                if not torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6):
                    rel = ((p.grad - q.grad).norm() / q.grad.norm()).item()
                    raise CheckFailed(f"the big batch's gradient for {name} (k = {k})",
                                      f"a relative error of {rel:.2e}",
                                      "sum the token losses of each micro-batch (reduction='sum', ignore_index=-100) "
                                      "and divide by the real tokens of ALL micro-batches, counted before the loop.")

    return run_check("6.1", body)
