"""Held-out cases for lab 00 (warm-up). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other shapes, dtypes and layouts than the public cases, chosen so that an answer tuned to those cases fails.
"""

from __future__ import annotations

import torch
from torch import nn

from utils.checks.core import expect_equal
from utils.checks.warmup import expect_formats, expect_new_storage, expect_tensor_bytes


def tensor_bytes_cases(tensor_bytes) -> None:
    """Other dtypes, and slices whose storage is larger than their elements."""
    expect_tensor_bytes(tensor_bytes, [
        torch.zeros(5, dtype=torch.float16), torch.zeros(3, 3, dtype=torch.int64), torch.zeros(4, dtype=torch.bool),
        torch.zeros(2, 2, dtype=torch.complex64), torch.zeros(10, 10)[:2], torch.zeros(6, 6)[::2, ::3]])


def unique_parameter_bytes_cases(unique_parameter_bytes) -> None:
    """FP16, buffers that are not parameters, three modules sharing one weight, frozen parameters."""
    half = nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4)).half()
    expect_equal(unique_parameter_bytes(half), (16 * 8 + 8 + 8 * 4 + 4) * 2, "bytes of an FP16 MLP")
    norm = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    expect_equal(unique_parameter_bytes(norm), (8 * 8 + 8 + 8 + 8) * 4, "bytes of a model with BatchNorm buffers",
                 hint="running statistics are buffers, not parameters")
    shared = nn.Linear(12, 12, bias=False)
    trio = nn.ModuleList([shared, nn.Sequential(shared), nn.ModuleDict({"again": shared})])
    expect_equal(unique_parameter_bytes(trio), 12 * 12 * 4, "bytes of one weight shared by three modules")
    frozen = nn.Linear(10, 10)
    frozen.requires_grad_(False)
    expect_equal(unique_parameter_bytes(frozen), (10 * 10 + 10) * 4, "bytes of a frozen Linear(10, 10)")


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
    "0.1": tensor_bytes_cases,
    "0.2": unique_parameter_bytes_cases,
    "0.3": format_bytes_cases,
    "0.4": new_storage_bytes_cases,
}
