"""Checks for lab 08 (FP8): public cases. Held-out cases live in grading/hidden/ch08.py."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from utils.course.checks.core import TORCHAO_FP8, CheckFailed, Verdict, expect_reasoning, guarded, run_check

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _answered(value: Any, name: str) -> Any:
    if value is ...:
        raise NotImplementedError(name)
    return value


# 8.1 ------------------------------------------------------------------------------------------------------------
def reference_scale_and_clipped(history: list[float], t: torch.Tensor, fmt: torch.dtype, margin: int, algo: str
                                ) -> tuple[float, int]:
    """One step of chapter 08's DelayedScaling: the scale from an amax history and the values it clips (the
    chapter's lesson code is tested against it)."""
    fmax = torch.finfo(fmt).max
    if not history:
        scale = 1.0
    else:
        amax = max(history) if algo == "max" else history[-1]
        scale = fmax / amax / 2**margin
    return scale, int(((t * scale).abs() > fmax).sum())


ALGOS = ("max", "most_recent", "current")


def reference_delayed_run(tensors: Sequence[torch.Tensor], fmt: torch.dtype, margin: int, history_len: int,
                          algo: str) -> list[tuple[float, int, int]]:
    """Per step, (scale, clipped, flushed) of a tensor sequence cast to `fmt` as Transformer Engine scales it.
    Delayed ("max", "most_recent"): the scale of step i comes from the amaxes of the `history_len` steps before it
    (reduced by max or taken from the last), recorded after each cast; "current": from the tensor itself. scale =
    fmax / amax / 2**margin; an empty history or an amax of 0 keeps the previous scale (1.0 at first), as TE's
    _default_sf_compute does. clipped: values whose scaled magnitude exceeds fmax; flushed: nonzero values the cast
    (saturated at fmax) turns into zero."""
    fmax = torch.finfo(fmt).max
    history: list[float] = []
    scale, rows = 1.0, []
    for t in tensors:
        amax_now = t.abs().max().item()
        window = history[-history_len:]
        amax = amax_now if algo == "current" else (max(window) if algo == "max" else window[-1]) if window else 0.0
        if amax > 0:
            scale = fmax / amax / 2**margin
        x = t * scale
        cast = x.clamp(-fmax, fmax).to(fmt).float()
        rows.append((scale, int((x.abs() > fmax).sum()), int(((cast == 0) & (t != 0)).sum())))
        history.append(amax_now)
    return rows


def spike_sequence(steps: int, spike_at: int, spike: float, growth: float, seed: int, n: int = 4096,
                   zero_at: int | None = None) -> list[torch.Tensor]:
    """Gradient-like tensors (std 0.5) growing by `growth` per step, one step `spike` times larger (a loss spike),
    optionally one step of zeros (a frozen layer's gradient)."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(n, generator=g) * 0.5 * growth**i * (spike if i == spike_at else 1.0) for i in range(steps)]
    if zero_at is not None:
        out[zero_at] = torch.zeros(n)
    return out


def expect_delayed_runs(delayed_scaling_run: Callable[..., list], cases: Sequence[tuple]) -> None:
    """cases: (spike_sequence kwargs, fmt, margin, history_len, algo)."""
    delayed_scaling_run = guarded(delayed_scaling_run, reference_delayed_run, reference_scale_and_clipped)
    for seq_kw, fmt, margin, history_len, algo in cases:
        tensors = spike_sequence(**seq_kw)
        expected = reference_delayed_run(tensors, fmt, margin, history_len, algo)
        got = delayed_scaling_run([t.clone() for t in tensors], fmt, margin, history_len, algo)
        zeros = f", zeros at step {seq_kw['zero_at']}" if seq_kw.get("zero_at") is not None else ""
        what = (f"{len(tensors)} steps (spike x{seq_kw['spike']:g} at step {seq_kw['spike_at']}, growth "
                f"{seq_kw['growth']:g}/step{zeros}), {str(fmt)[6:]}, margin {margin}, history_len {history_len}, "
                f"{algo!r}")
        if not isinstance(got, list) or len(got) != len(expected) or not all(
                isinstance(r, tuple) and len(r) == 3 for r in got):
            raise CheckFailed(f"a list of {len(expected)} (scale, clipped, flushed) tuples for {what}",
                              repr(got)[:80])
        for step, (row, exp) in enumerate(zip(got, expected, strict=True)):
            ints = all(type(v) is int for v in row[1:])
            if not ints or not isinstance(row[0], int | float) or abs(float(row[0]) - exp[0]) > 1e-9 * exp[0] \
                    or row[1:] != exp[1:]:
                raise CheckFailed(f"step {step}: (scale, clipped, flushed) = ({exp[0]:.6g}, {exp[1]}, {exp[2]}) for "
                                  f"{what}", repr(row)[:80],
                                  "the scale of a step uses only the amaxes of the history_len steps BEFORE it (its "
                                  "own amax is recorded after the cast), except 'current'; an empty history or an "
                                  "amax of 0 keeps the previous scale; clipped and flushed are Python ints "
                                  "(flushed: nonzero values whose saturated cast is 0).")


SPIKE = {"steps": 10, "spike_at": 4, "spike": 1000.0, "growth": 1.05, "seed": 0}


def check_delayed_scaling(delayed_scaling_run: Callable[..., list]) -> Verdict:
    """Exercise 8.1: delayed (and current) scaling over a tensor sequence with a loss spike: the scale, the values
    clipped and the values flushed to zero at every step."""
    return run_check("8.1", lambda: expect_delayed_runs(delayed_scaling_run, [
        (SPIKE, E4M3, 0, 4, "max"), (SPIKE, E4M3, 0, 4, "current")]), points=2)


# 8.2 ------------------------------------------------------------------------------------------------------------
ROUNDINGS = ("floor", "up")


def mx_exponents(b: torch.Tensor, rounding: str) -> torch.Tensor:
    """Per row of `b` (one block per row), the exponent e of the block's power-of-two scale 2**e, clamped to
    [-127, 127]. "floor" (OCP MX v1.0): e = floor(log2(amax)) - 8, so amax / 2**e lands in [256, 512) and values
    above 448 clip. "up" (Transformer Engine's float_to_e8m0, a cvt.rp in transformer_engine/common/util/ptx.cuh):
    e = ceil(log2(amax / 448)), so amax / 2**e <= 448 and nothing clips. frexp keeps both exact."""
    amax = b.abs().amax(1, keepdim=True).clamp_min(2.0**-127)
    if rounding == "up":
        m, e = torch.frexp(amax / torch.finfo(E4M3).max)
        e = torch.where(m == 0.5, e - 1, e)
    elif rounding == "floor":
        e = torch.frexp(amax)[1] - 1 - math.floor(math.log2(torch.finfo(E4M3).max))
    else:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return e.clamp(-127, 127).float()


def reference_mx_dequantize(t: torch.Tensor, block: int, rounding: str = "floor") -> torch.Tensor:
    """MXFP8 (E4M3 values, one E8M0 scale per `block` consecutive values), quantized and dequantized."""
    b = t.reshape(-1, block).float()
    scale = 2.0 ** mx_exponents(b, rounding)
    return (b / scale).clamp(-448, 448).to(E4M3).float().mul(scale).reshape(t.shape)


def expect_mx_cases(mx_quantize: Callable[..., tuple[torch.Tensor, torch.Tensor]], cases: Sequence[tuple]) -> None:
    """cases: (shape, block, seed, spread of exponents, rounding)."""
    mx_quantize = guarded(mx_quantize, reference_mx_dequantize, mx_exponents,
                          "torchao.prototype.mx_formats.mx_tensor:to_mx")
    for shape, block, seed, spread, rounding in cases:
        g = torch.Generator().manual_seed(seed)
        exponents = torch.randint(-spread, spread + 1, shape, generator=g).float()
        t = torch.randn(*shape, generator=g) * torch.exp2(exponents)
        t.view(-1)[:block] = 0.0  # one all-zero block
        got = mx_quantize(t.clone(), block, rounding)
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailed("a tuple (codes, exps)", repr(type(got)))
        codes, exps = got
        if codes.dtype != E4M3 or exps.dtype != torch.uint8:
            raise CheckFailed("codes in torch.float8_e4m3fn and exps in torch.uint8", f"{codes.dtype}, {exps.dtype}")
        if codes.numel() != t.numel() or exps.numel() != t.numel() // block:
            raise CheckFailed(f"{t.numel()} codes and {t.numel() // block} exponents (one per block of {block})",
                              f"{codes.numel()} and {exps.numel()}")
        deq = (codes.float().reshape(-1, block) * torch.exp2(exps.float().reshape(-1, 1) - 127)).reshape(t.shape)
        expected = reference_mx_dequantize(t, block, rounding)
        if not torch.equal(deq, expected):
            other = reference_mx_dequantize(t, block, "up" if rounding == "floor" else "floor")
            bad = (deq != expected).sum().item()
            hint = ("these are the other rounding's values: " if torch.equal(deq, other) else "") + (
                "floor (OCP): e = floor(log2(amax)) - 8, values clamped to +-448 before the cast (some clip)"
                if rounding == "floor" else
                "up (Transformer Engine): e = ceil(log2(amax / 448)), so amax / 2**e <= 448 and nothing clips")
            raise CheckFailed(f"codes x 2**(exps - 127) equal to MX dequantization with rounding {rounding!r} for "
                              f"shape {shape}, block {block}", f"{bad} values differ",
                              hint + "; exponents clamped to [-127, 127] (an all-zero block gets -127), exps = e + "
                              "127 as uint8. torch.frexp gives exact exponents where log2 may round.")


# A Llama-3-8B's Linear weights (Transformer Engine quantizes Linear layers, not embeddings or norms): per layer
# q and o (4096 x 4096), k and v with 8 KV heads of 128 (4096 x 1024 each), SwiGLU's gate, up and down
# (4096 x 14336 each), 32 layers.
LLAMA8B = {"d_model": 4096, "n_layer": 32, "n_head": 32, "n_kv_head": 8, "ffn_hidden": 14336, "vocab": 128256}


def llama_linear_weights(d_model: int, n_layer: int, n_head: int, n_kv_head: int, ffn_hidden: int) -> int:
    kv = d_model // n_head * n_kv_head
    return n_layer * (2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * ffn_hidden)


def check_mx_bytes(prediction: int, reasoning: str, mx_quantize: Callable[..., tuple[torch.Tensor, torch.Tensor]]
                   ) -> Verdict:
    """Exercise 8.2: predict the MXFP8 bytes of a Llama-3-8B's Linear weights (a model no laptop holds), then
    build MXFP8 with both scale roundings (OCP's floor and Transformer Engine's round-up) and measure the bytes."""

    def body() -> None:
        guess = _answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float):
            raise CheckFailed("prediction as a number of bytes", repr(guess))
        expect_reasoning(reasoning, "8.2")
        n = llama_linear_weights(*(LLAMA8B[k] for k in ("d_model", "n_layer", "n_head", "n_kv_head", "ffn_hidden")))
        truth = n + n // 32
        if abs(guess - truth) > 0.01 * truth:
            hint = ("k and v are narrower than q: 8 KV heads of 128 give 4096 x 1024; SwiGLU has three 4096 x 14336 "
                    "matrices; embeddings and the untied head are not Linear layers TE quantizes" if
                    abs(guess - truth) > 0.02 * truth else "one E8M0 byte per block of 32 values on top of one byte "
                    "per value")
            raise CheckFailed(f"a prediction within 1% of {truth:,} bytes", f"{guess:,}", hint)
        t = torch.randn(512, 1024, generator=torch.Generator().manual_seed(8))
        codes, exps = guarded(mx_quantize, reference_mx_dequantize, mx_exponents)(t, 32, "up")
        measured = codes.untyped_storage().nbytes() + exps.untyped_storage().nbytes()
        if measured != t.numel() + t.numel() // 32:
            raise CheckFailed(f"{t.numel() + t.numel() // 32:,} bytes for a (512, 1024) tensor", f"{measured:,}",
                              "codes one byte each (E4M3), one uint8 exponent per block, nothing else kept.")
        expect_mx_cases(mx_quantize, [((64, 64), 32, 0, 6, "floor"), ((64, 64), 32, 0, 6, "up")])

    return run_check("8.2", body, points=2)


# 8.3 ------------------------------------------------------------------------------------------------------------
def reference_roundtrip(t: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    """Rowwise FP8 (one scale per row, a row being the last dimension, as torchao's rowwise recipe scales a GEMM's
    input), quantized and dequantized; a row of zeros comes back as zeros."""
    fmax = torch.finfo(fmt).max
    amax = t.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, fmax / amax, torch.ones_like(amax))
    return (t * scale).clamp(-fmax, fmax).to(fmt).float() / scale


def expect_roundtrips(fp8_roundtrip: Callable[[torch.Tensor, torch.dtype], torch.Tensor],
                      cases: Sequence[tuple]) -> None:
    fp8_roundtrip = guarded(fp8_roundtrip, reference_roundtrip, *TORCHAO_FP8)
    for name, t, fmt in cases:
        expected = reference_roundtrip(t, fmt)
        got = fp8_roundtrip(t.clone(), fmt)
        if not isinstance(got, torch.Tensor) or got.shape != t.shape:
            raise CheckFailed(f"a tensor of shape {tuple(t.shape)}", repr(type(got)) if not isinstance(
                got, torch.Tensor) else f"shape {tuple(got.shape)}")
        if not torch.allclose(got.float(), expected, rtol=1e-6, atol=0.0, equal_nan=False):
            err = (got.float() - expected).abs().nan_to_num(float("inf")).max().item()
            raise CheckFailed(f"the rowwise FP8 round trip of {name} {tuple(t.shape)} in {str(fmt)[6:]}",
                              f"a max error of {err:.3g}",
                              "each row (the last dimension) gets its own scale, from its largest MAGNITUDE, kept "
                              "with keepdim so that it broadcasts along the row; dequantizing undoes the scale; a row "
                              "of zeros has no amax to scale by.")


def check_roundtrip(fp8_roundtrip: Callable[[torch.Tensor, torch.dtype], torch.Tensor]) -> Verdict:
    """Exercise 8.3: a colleague's rowwise FP8 round trip, fixed: it matches the reference."""
    g = torch.Generator().manual_seed(3)
    rows = torch.randn(48, 32, generator=g) * torch.logspace(-3, 2, 48).unsqueeze(1)  # rows of growing magnitude
    return run_check("8.3", lambda: expect_roundtrips(fp8_roundtrip, [
        ("activations whose rows span five decades", rows, E4M3),
        ("a row of large negative values", torch.randn(1, 256, generator=g) - 3.0, E4M3),
        ("small gradients", torch.randn(64, 32, generator=g) * 1e-5, E4M3)]), points=2)


# 8.4 ------------------------------------------------------------------------------------------------------------
def reference_fp8_plan(capability: tuple[int, int], te_version: tuple[int, int]) -> dict[str, str | None]:
    cap = tuple(capability)
    if cap < (8, 9):
        return {"recipe": None, "context": None}
    te = tuple(te_version)
    # TE's recipe classes by release (transformer_engine/common/recipe/__init__.py at tags v1.13, v2.0, v2.2):
    # DelayedScaling only up to 1.13; MXFP8BlockScaling from 2.0 (check_mxfp8_support in pytorch/fp8.py: compute
    # capability 10.0+, and from v2.6 not 12.0+); Float8CurrentScaling from 2.2
    if cap >= (10, 0) and te >= (2, 0) and (cap < (12, 0) or te < (2, 6)):
        recipe = "MXFP8BlockScaling"
    else:
        recipe = "Float8CurrentScaling" if te >= (2, 2) else "DelayedScaling"
    return {"recipe": recipe, "context": "te.autocast" if te >= (2, 9) else "te.fp8_autocast"}


def expect_fp8_plans(choose_fp8_recipe: Callable[..., dict], cases: Sequence[tuple]) -> None:
    choose_fp8_recipe = guarded(choose_fp8_recipe, reference_fp8_plan)
    for gpu, capability, te_version in cases:
        expected = reference_fp8_plan(capability, te_version)
        got = choose_fp8_recipe(capability, te_version)
        if got != expected:
            raise CheckFailed(f"{expected} for a {gpu} (compute capability {capability[0]}.{capability[1]}) with "
                              f"TE {te_version[0]}.{te_version[1]}", repr(got),
                              "FP8 needs 8.9+; MXFP8 block scaling where TE's check_mxfp8_support says yes (10.0+, "
                              "and from TE 2.6 not 12.0+); elsewhere current per-tensor scaling; te.autocast from "
                              "TE 2.9, te.fp8_autocast before; no FP8 means no recipe and no context (None, None).")


def check_fp8_plan(choose_fp8_recipe: Callable[..., dict]) -> Verdict:
    """Exercise 8.4: an FP8 recipe and the TE context for a GPU and a Transformer Engine release."""
    return run_check("8.4", lambda: expect_fp8_plans(choose_fp8_recipe, [
        ("T4", (7, 5), (2, 9)), ("H100", (9, 0), (2, 10)), ("L4", (8, 9), (2, 8)), ("B200", (10, 0), (2, 9))]),
        points=3)
