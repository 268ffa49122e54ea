"""Checks for the warm-up lab (lab00_warmup): four small exercises on counting bytes that prove the lab pipeline end
to end (public cases here; the grader's held-out cases live in grading/hidden/ch00.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from utils.checks.core import CheckFailed, Verdict, answered, expect_equal, expect_reasoning, run_check

# Exercise 0.4's prediction: the new bytes y = x[:, :256].contiguous().to(torch.bfloat16) keeps alive.
PREDICT_SHAPE = (512, 512)


def predict_target(x: torch.Tensor) -> torch.Tensor:
    """The expression whose new storage exercise 0.4 asks the learner to predict."""
    return x[:, :256].contiguous().to(torch.bfloat16)


def expect_tensor_bytes(tensor_bytes: Callable[[torch.Tensor], int], cases: list[torch.Tensor]) -> None:
    for t in cases:
        expected = t.numel() * t.element_size()
        expect_equal(tensor_bytes(t), expected, f"tensor_bytes(<{tuple(t.shape)} {t.dtype}>)",
                     hint="elements times bytes per element: see t.numel() and t.element_size().")


def check_tensor_bytes(tensor_bytes: Callable[[torch.Tensor], int]) -> Verdict:
    """Exercise 0.1: bytes of a tensor's elements, for several shapes and dtypes."""

    def body() -> None:
        expect_tensor_bytes(tensor_bytes, [
            torch.zeros(3, 4), torch.zeros(10, dtype=torch.bfloat16), torch.zeros(2, 3, 5, dtype=torch.float64),
            torch.zeros(7, dtype=torch.float8_e4m3fn), torch.zeros(0, 4), torch.zeros(8, 8).t()])

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


def expect_formats(format_bytes: Callable[[int], str], cases: dict[int, str]) -> None:
    for n, expected in cases.items():
        expect_equal(format_bytes(n), expected, f"format_bytes({n:_})",
                     hint="1 KiB = 1024 bytes, 1 MiB = 1024 KiB, ...; pick the largest unit whose value is at "
                          "least 1, show it with 2 decimals, and show plain bytes as an integer ('512 B').")


def check_format_bytes(format_bytes: Callable[[int], str]) -> Verdict:
    """Exercise 0.3: the fixed format_bytes (binary units, the course's convention)."""

    def body() -> None:
        expect_formats(format_bytes, {0: "0 B", 512: "512 B", 1023: "1023 B", 1536: "1.50 KiB",
                                      3 * 2**20: "3.00 MiB", 5 * 2**28: "1.25 GiB", 3_000_000: "2.86 MiB"})

    return run_check("0.3", body, points=2)


def expect_new_storage(new_storage_bytes: Callable, cases: list[tuple[str, Callable, torch.Tensor, int]]) -> None:
    for label, fn, x, expected in cases:
        expect_equal(new_storage_bytes(fn, x), expected, f"new_storage_bytes({label})",
                     hint="a view shares x's storage (compare x.untyped_storage().data_ptr() with the result's); "
                          "otherwise the result keeps its WHOLE storage alive: result.untyped_storage().nbytes().")


def check_new_storage_bytes(prediction: int, reasoning: str, new_storage_bytes: Callable) -> Verdict:
    """Exercise 0.4: measure the new storage a result keeps alive, and the prediction made before measuring."""

    def body() -> None:
        x = torch.zeros(*PREDICT_SHAPE)
        n = x.numel()
        expect_new_storage(new_storage_bytes, [
            ("lambda t: t.view(-1)", lambda t: t.view(-1), x, 0),
            ("lambda t: t.t()", lambda t: t.t(), x, 0),
            ("lambda t: t * 2", lambda t: t * 2, x, n * 4),
            ("lambda t: t.to(torch.bfloat16)", lambda t: t.to(torch.bfloat16), x, n * 2),
            ("lambda t: t[:, :256].contiguous().to(torch.bfloat16)", predict_target, x, 512 * 256 * 2),
        ])
        guess = answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float):
            raise CheckFailed("prediction as a number of bytes", repr(guess))
        truth = predict_target(x).untyped_storage().nbytes()
        if abs(guess - truth) > 0.05 * truth:
            raise CheckFailed(f"a prediction within 5% of the measured {truth:,} bytes", f"{guess:,}",
                              "the slice is a view; contiguous() copies it; the BF16 cast copies again at 2 bytes "
                              "per element, and only the last copy stays alive.")
        expect_reasoning(reasoning, "0.4")

    return run_check("0.4", body, points=2)
