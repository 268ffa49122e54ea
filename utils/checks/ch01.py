"""Checks for lab 01 (where the memory goes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from utils.checks.core import Verdict, expect_equal, run_check
from utils.measure import optimizer_state_bytes, saved_activation_bytes
from utils.models import GPT, GPTConfig, cnn, gpt_batch, mlp


def check_adam_state_bytes(adam_state_bytes: Callable[[nn.Module], int]) -> Verdict:
    """Exercise 1.1: Adam's state bytes predicted without running it, against a real optimizer step."""

    def body() -> None:
        models = [mlp(8, 16, 4), cnn(4, 3, 8), GPT(GPTConfig(n_layer=1, d_model=32, seq_len=16, vocab_size=50))]
        frozen = mlp(8, 16, 4)
        frozen[0].requires_grad_(False)
        half = mlp(8, 16, 4).to(torch.bfloat16)
        for model in models + [frozen, half]:
            opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad])
            for p in model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
            opt.step()
            n = sum(p.numel() for p in model.parameters())
            expect_equal(adam_state_bytes(model), optimizer_state_bytes(opt),
                         f"Adam state bytes of a {type(model).__name__} with {n} parameters",
                         hint="two moments in the parameter's dtype per trainable element, plus a "
                         "4-byte float32 step counter per trainable parameter tensor; frozen ones get nothing.")

    return run_check("1.1", body)


def check_saved_bytes(count_saved_bytes: Callable[..., int]) -> Verdict:
    """Exercise 1.2: a saved-tensor hook that counts activation bytes, against utils.measure."""

    def body() -> None:
        cfg = GPTConfig(n_layer=2, d_model=32, seq_len=16, vocab_size=50)
        cases: list[tuple[str, Any, tuple]] = [
            ("an MLP", mlp(8, 32, 4, depth=3), (torch.randn(5, 8),)),
            ("a GPT with its loss", GPT(cfg), gpt_batch(cfg, 2)),
        ]
        x = torch.randn(6, 6, requires_grad=True)
        cases.append(("x * x (one tensor saved twice)", lambda a: a * a, (x,)))
        for name, fn, args in cases:
            expect_equal(count_saved_bytes(fn, *args), saved_activation_bytes(fn, *args), f"saved bytes of {name}",
                         hint="count each storage once (t.untyped_storage()), skip parameters "
                         "(isinstance(t._base or t, nn.Parameter)), and return the unpacked tensor unchanged.")

    return run_check("1.2", body)


def check_mlp_activation_prediction(predict: Callable[[int, int, int, int, int], int]) -> Verdict:
    """Exercise 1.3: a formula for utils.models.mlp's saved bytes, against measurement."""

    def body() -> None:
        sizes = [(4, 8, 16, 2, 1), (7, 8, 32, 3, 2), (16, 64, 256, 10, 3), (1, 5, 9, 2, 5)]
        for batch, d_in, hidden, d_out, depth in sizes:
            measured = saved_activation_bytes(mlp(d_in, hidden, d_out, depth), torch.randn(batch, d_in))
            expect_equal(predict(batch, d_in, hidden, d_out, depth), measured,
                         f"predicted saved bytes for batch={batch}, d_in={d_in}, hidden={hidden}, depth={depth}",
                         hint="each Linear saves its input and each GELU saves its input; is the GELU's output "
                         "the same storage as anything else that is saved?")

    return run_check("1.3", body)
