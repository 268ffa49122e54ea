"""Checks for the warm-up lab (lab00_warmup): four small exercises on counting bytes that prove the lab pipeline end
to end (public cases here; the grader's held-out cases live in grading/hidden/ch00.py)."""

from __future__ import annotations

import io
import math
import re
import zipfile
from collections.abc import Callable

import torch
from torch import nn

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answer_each,
    answered,
    expect_equal,
    expect_reasoning,
    own_work,
    run_check,
)

# Exercise 0.4's prediction: the new bytes y = x[:, :256].contiguous().to(torch.bfloat16) keeps alive.
PREDICT_SHAPE = (512, 512)


def predict_target(x: torch.Tensor) -> torch.Tensor:
    """The expression whose new storage exercise 0.4 asks the learner to predict."""
    return x[:, :256].contiguous().to(torch.bfloat16)


def packed_truth(shape: tuple[int, ...], bits: int) -> int:
    """The bytes of a tensor of `shape` whose elements take `bits` bits each, packed along the last dimension with
    each row starting on a whole byte (torch's float4_e2m1fn_x2 packs two FP4 codes per byte so; tests tie this to
    torch's dtypes wherever one exists)."""
    last = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    return rows * -(-last * bits // 8)


def expect_packed_bytes(packed_bytes: Callable[[tuple[int, ...], int], int],
                        cases: list[tuple[tuple[int, ...], int]]) -> None:
    for shape, bits in cases:
        expect_equal(packed_bytes(shape, bits), packed_truth(shape, bits), f"packed_bytes({shape}, bits={bits})",
                     hint="each row (the last dimension) takes last x bits bits, rounded UP to whole bytes; then "
                          "times the number of rows (the product of the other dimensions; a 0-d tensor is one "
                          "row of one element).")


def check_packed_bytes(packed_bytes: Callable[[tuple[int, ...], int], int]) -> Verdict:
    """Exercise 0.1: bytes of a tensor in a sub-byte or odd-width format (FP4, FP6, 1-bit masks), rows packed."""

    def body() -> None:
        expect_packed_bytes(packed_bytes, [((4096, 4096), 4), ((3, 5), 4), ((2, 10), 6), ((7, 9), 1),
                                           ((2, 3, 8), 16), ((0, 4), 4), ((5,), 4)])

    return run_check("0.1", body)


def written_bytes(state: dict) -> int:
    """The bytes of tensor data torch.save writes for `state`, measured: the sizes of the data records (one per
    storage) in the zip archive torch.save writes."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return sum(i.file_size for i in archive.infolist() if re.search(r"/data/\d+$", i.filename))


def expect_saved_state_bytes(saved_state_bytes: Callable[[dict], int], cases: list[tuple[str, dict]]) -> None:
    with own_work(written_bytes, torch.save, torch.serialization._save):  # the answers first, in one batch
        answers = answer_each(saved_state_bytes, [(dict(state),) for _, state in cases])
    for (label, state), got in zip(cases, answers, strict=True):
        expect_equal(got, written_bytes(state), f"saved_state_bytes({label})",
                     hint="torch.save writes each STORAGE once, and whole: two tensors that share a storage (tied "
                          "weights, views) cost it once, and a small slice of a big tensor writes all of the big "
                          "one (t.untyped_storage().nbytes()). Buffers are in a state_dict too.")


def check_saved_state_bytes(saved_state_bytes: Callable[[dict], int]) -> Verdict:
    """Exercise 0.2: the tensor bytes torch.save writes for a state_dict (storages once and whole), not running it."""

    def body() -> None:
        emb, head = nn.Embedding(100, 16), nn.Linear(16, 100, bias=False)
        head.weight = emb.weight  # weight tying, as in GPT-2
        big = torch.zeros(1000, 64)
        expect_saved_state_bytes(saved_state_bytes, [
            ("an MLP's state_dict", nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).state_dict()),
            ("a tied embedding and head", nn.ModuleDict({"emb": emb, "head": head}).state_dict()),
            ("a Linear and a BatchNorm1d", nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).state_dict()),
            ("{'first_rows': big[:2]} of a 1000 x 64 FP32 big", {"first_rows": big[:2]}),
        ])

    return run_check("0.2", body)


def expect_formats(format_bytes: Callable[[int], str], cases: dict[int, str]) -> None:
    for n, expected in cases.items():
        expect_equal(format_bytes(n), expected, f"format_bytes({n:_})",
                     hint="1 KiB = 1024 bytes, 1 MiB = 1024 KiB, ...; pick the largest unit whose value is at "
                          "least 1, show it with 2 decimals, and show plain bytes as an integer ('512 B').")


def check_format_bytes(format_bytes: Callable[[int], str]) -> Verdict:
    """Exercise 0.3: the fixed format_bytes (binary units, the course's convention)."""

    def body() -> None:
        # 2**20 - 1: the unit is chosen on the exact value (1023.999 KiB), then rounded, as the instructions say
        expect_formats(format_bytes, {0: "0 B", 512: "512 B", 1023: "1023 B", 1536: "1.50 KiB",
                                      2**20 - 1: "1024.00 KiB", 3 * 2**20: "3.00 MiB", 5 * 2**28: "1.25 GiB",
                                      3_000_000: "2.86 MiB"})

    return run_check("0.3", body, points=2)


def expect_new_storage(new_storage_bytes: Callable, cases: list[tuple[str, Callable, torch.Tensor, int]]) -> None:
    answers = answer_each(new_storage_bytes, [(fn, x) for _, fn, x, _ in cases])  # in one batch
    for (label, _, _, expected), got in zip(cases, answers, strict=True):
        expect_equal(got, expected, f"new_storage_bytes({label})",
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
            raise CheckFailed("a prediction within 5% of the measured bytes (the check withholds them: predict, then "
                              "measure with your own function)", f"{guess:,}",
                              "the slice is a view; contiguous() copies it; the BF16 cast copies again at 2 bytes "
                              "per element, and only the last copy stays alive.")
        expect_reasoning(reasoning, "0.4")

    return run_check("0.4", body, points=2)
