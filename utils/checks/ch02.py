"""Checks for lab 02 (number formats)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch

from utils.checks.core import CheckFailed, Verdict, run_check
from utils.formats import decode, encode


def check_decode_fp16(decode_fp16: Callable[[int], float]) -> Verdict:
    """Exercise 2.1: every one of the 65536 FP16 bit patterns, against torch."""

    def body() -> None:
        codes = torch.arange(2**16, dtype=torch.int32)
        values = torch.where(codes >= 2**15, codes - 2**16, codes).to(torch.int16).view(torch.float16).double()
        for code, expected in zip(range(2**16), values.tolist(), strict=True):
            got = decode_fp16(code)
            ok = (math.isnan(got) and math.isnan(expected)) if math.isnan(expected) else got == expected
            if not ok:
                raise CheckFailed(f"decode_fp16({code:#06x}) = {expected!r}", repr(got),
                                  "exponent field 0 means subnormal (no implicit 1, exponent 1 - 15); "
                                  "all ones means inf (mantissa 0) or NaN.")

    return run_check("2.1", body)


def check_round_to_bf16(round_to_bf16: Callable[[float], float]) -> Verdict:
    """Exercise 2.2: float32 values rounded to BF16, against torch's cast (ties to even included)."""

    def body() -> None:
        rng = random.Random(0)
        xs = [0.0, -0.0, 1.0, 1 + 2**-8, 1 + 3 * 2**-8, 3.3895313892515355e38, -2.5, 1e-40, math.inf]
        xs += [rng.uniform(-1, 1) * 2.0 ** rng.randint(-130, 127) for _ in range(20_000)]
        xs32 = torch.tensor(xs, dtype=torch.float32)
        expected = xs32.to(torch.bfloat16).double().tolist()
        for x, want in zip(xs32.tolist(), expected, strict=True):
            got = round_to_bf16(x)
            if got != want:
                raise CheckFailed(f"round_to_bf16({x!r}) = {want!r}", repr(got),
                                  "add 0x7FFF plus the lowest kept bit, then clear the low 16 bits.")

    return run_check("2.2", body)


def check_smallest_kept_update(smallest_kept_update: Callable[[float, str], float]) -> Verdict:
    """Exercise 2.3: the smallest power of two that changes a weight when added in a format."""

    def reference(weight: float, fmt: str) -> float:
        u = 2.0**-160
        while encode(decode(encode(weight, fmt), fmt) + u, fmt) == encode(weight, fmt):
            u *= 2
        return u

    def body() -> None:
        for fmt in ("fp16", "bf16", "fp32"):
            for weight in (1.0, 0.75, 100.0, 1.0078125, 3.0, 1e-3):
                expected = reference(weight, fmt)
                got = smallest_kept_update(weight, fmt)
                if got != expected:
                    raise CheckFailed(f"smallest_kept_update({weight}, {fmt!r}) = {expected!r}", repr(got),
                                      "half a spacing is a tie: it rounds to the even neighbour, which may be the "
                                      "weight itself.")

    return run_check("2.3", body)
