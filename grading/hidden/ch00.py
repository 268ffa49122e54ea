"""Held-out cases for lab 00 (warm-up). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other shapes, dtypes and layouts than the public cases, chosen so that an answer tuned to those cases fails.
"""

from __future__ import annotations

import torch
from torch import nn

from utils.course.checks.warmup import expect_formats, expect_new_storage, expect_packed_bytes, expect_saved_state_bytes


def packed_bytes_cases(packed_bytes) -> None:
    """A 0-d tensor, empty rows, odd widths that pad every row, 3-bit and 12-bit codes, Llama-3's embedding in FP4."""
    expect_packed_bytes(packed_bytes, [((), 32), ((3, 0), 4), ((1, 1), 1), ((128256, 4096), 4), ((4, 3), 12),
                                       ((10, 33), 6), ((2, 2, 7), 3), ((8, 16), 8), ((6, 1), 4)])


def saved_state_bytes_cases(saved_state_bytes) -> None:
    """A BF16 model, three views of one storage, a slice cloned (its own bytes only), FP8 and bool tensors, an empty
    tensor, one weight shared by three modules."""
    x = torch.zeros(40, 24)
    shared = nn.Linear(12, 12, bias=False)
    trio = nn.ModuleList([shared, nn.Sequential(shared), nn.ModuleDict({"again": shared})])
    expect_saved_state_bytes(saved_state_bytes, [
        ("a BF16 MLP's state_dict", nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4)).to(torch.bfloat16).state_dict()),
        ("{'a': x, 'b': x.t(), 'c': x[3:5]}", {"a": x, "b": x.t(), "c": x[3:5]}),
        ("{'rows': x[:2].clone()}", {"rows": x[:2].clone()}),
        ("FP8 and bool tensors", {"w8": torch.zeros(33, 7, dtype=torch.float8_e4m3fn),
                                  "mask": torch.ones(5, 5, dtype=torch.bool)}),
        ("{'empty': torch.zeros(0)}", {"empty": torch.zeros(0)}),
        ("one weight shared by three modules", trio.state_dict()),
        ("a column of a big tensor", {"col": torch.zeros(300, 20, dtype=torch.float64)[:, 3]}),
    ])


def format_bytes_cases(format_bytes) -> None:
    """Exact unit boundaries, terabytes and beyond, and a marketed decimal size."""
    expect_formats(format_bytes, {1: "1 B", 1024: "1.00 KiB", 2**20: "1.00 MiB", 2**30: "1.00 GiB",
                                  2**40: "1.00 TiB", 2**50: "1024.00 TiB", 16 * 10**9: "14.90 GiB",
                                  80 * 10**9: "74.51 GiB"})


def new_storage_bytes_cases(prediction, reasoning, new_storage_bytes) -> None:
    """Views at an offset, a slice of a fresh copy, expand, other dtypes and shapes."""
    x = torch.zeros(64, 32, dtype=torch.float64)
    n = x.numel()
    expect_new_storage(new_storage_bytes, [
        ("lambda t: t[1:]", lambda t: t[1:], x, 0),
        ("lambda t: t[5:9, 3]", lambda t: t[5:9, 3], x, 0),
        ("lambda t: t[:1].expand(100, -1)", lambda t: t[:1].expand(100, -1), x, 0),
        ("lambda t: (t * 2)[:10]", lambda t: (t * 2)[:10], x, n * 8),
        ("lambda t: t.float().t()", lambda t: t.float().t(), x, n * 4),
        ("lambda t: t", lambda t: t, x, 0),
    ])
    y = torch.zeros(3, 7, 5, dtype=torch.bfloat16)
    expect_new_storage(new_storage_bytes, [
        ("lambda t: t.permute(2, 0, 1)", lambda t: t.permute(2, 0, 1), y, 0),
        ("lambda t: t.permute(2, 0, 1).contiguous()", lambda t: t.permute(2, 0, 1).contiguous(), y, 3 * 7 * 5 * 2),
    ])


HIDDEN = {
    "0.1": packed_bytes_cases,
    "0.2": saved_state_bytes_cases,
    "0.3": format_bytes_cases,
    "0.4": new_storage_bytes_cases,
}
