"""Checks for lab 05 (gradient checkpointing)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from utils.checks.core import CheckFailed, Verdict, expect_equal, run_check
from utils.measure import saved_activation_bytes


def _stack(n: int, d: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                           for _ in range(n)))


def check_segmented_forward(segmented_forward: Callable[[nn.Sequential, torch.Tensor, int], torch.Tensor]) -> Verdict:
    """Exercise 5.1: k checkpointed segments save only k segment inputs, and give the plain gradients."""

    def body() -> None:
        for n, k, batch, d in ((8, 2, 4, 16), (9, 3, 2, 8), (6, 6, 3, 8), (5, 2, 2, 8)):
            stack = _stack(n, d)
            x = torch.randn(batch, d, requires_grad=True)
            saved = saved_activation_bytes(segmented_forward, stack, x, k)
            expect_equal(saved, k * batch * d * 4, f"saved bytes of {n} blocks in {k} segments (batch {batch}, d {d})",
                         hint="checkpoint every segment, the last one too, so that only each segment's input is kept; "
                         "split n blocks into k consecutive groups.")
            reference = copy.deepcopy(stack)
            x_ref = x.detach().clone().requires_grad_(True)
            reference(x_ref).pow(2).sum().backward()
            out = segmented_forward(stack, x, k)
            if out.shape != (batch, d):
                raise CheckFailed(f"an output of shape {(batch, d)}", f"{tuple(out.shape)}",
                                  "return the last block's output.")
            out.pow(2).sum().backward()
            for (name, p), q in zip(stack.named_parameters(), reference.parameters(), strict=True):
                if p.grad is None or not torch.allclose(p.grad, q.grad, atol=1e-6):
                    raise CheckFailed(f"the plain forward's gradient for {name}", "a different or missing gradient",
                                      "run the blocks in order, each segment under torch.utils.checkpoint.checkpoint("
                                      "..., use_reentrant=False).")
            if not torch.allclose(x.grad, x_ref.grad, atol=1e-6):
                raise CheckFailed("the input's gradient of the plain forward", "a different one", "chain all segments.")

    return run_check("5.1", body)
