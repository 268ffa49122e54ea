"""Checks for the warm-up lab (00_warmup): two small exercises that prove the lab pipeline end to end."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from utils.checks.core import Verdict, expect_equal, run_check


def check_tensor_bytes(tensor_bytes: Callable[[torch.Tensor], int]) -> Verdict:
    """Exercise 0.1: bytes of a tensor's elements, for several shapes and dtypes."""

    def body() -> None:
        cases = [torch.zeros(3, 4), torch.zeros(10, dtype=torch.bfloat16), torch.zeros(2, 3, 5, dtype=torch.float64),
                 torch.zeros(7, dtype=torch.float8_e4m3fn), torch.zeros(0, 4), torch.zeros(8, 8).t()]
        for t in cases:
            expected = t.numel() * t.element_size()
            expect_equal(tensor_bytes(t), expected, f"tensor_bytes(<{tuple(t.shape)} {t.dtype}>)",
                         hint="elements times bytes per element: see t.numel() and t.element_size().")

    return run_check("0.1", body)


def check_unique_parameter_bytes(unique_parameter_bytes: Callable[[nn.Module], int]) -> Verdict:
    """Exercise 0.2: bytes of a model's parameters, a parameter shared by two layers counted once."""

    def body() -> None:
        plain = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        expect_equal(unique_parameter_bytes(plain), (4 * 8 + 8 + 8 * 2 + 2) * 4, "bytes of a small MLP",
                     hint="add up every parameter's numel() * element_size().")
        emb, head = nn.Embedding(100, 16), nn.Linear(16, 100, bias=False)
        head.weight = emb.weight  # weight tying, as in GPT-2
        tied = nn.ModuleDict({"emb": emb, "head": head})
        expect_equal(unique_parameter_bytes(tied), 100 * 16 * 4, "bytes of a model with tied weights",
                     hint="model.parameters() yields a shared parameter once; did you walk the modules yourself?")
        half = nn.Linear(32, 32).to(torch.bfloat16)
        expect_equal(unique_parameter_bytes(half), (32 * 32 + 32) * 2, "bytes of a BF16 Linear(32, 32)",
                     hint="BF16 elements take 2 bytes each.")

    return run_check("0.2", body)
