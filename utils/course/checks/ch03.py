"""Checks for lab 03 (loss scaling).

Each exercise's cases live in an `expect_*` function that grading/hidden/ch03.py calls again with held-out cases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answered,
    expect_reasoning,
    guarded,
    observe,
    own_work,
    run_check,
)
from utils.course.scenes.ch03 import loop_scene, scaler_scene

# 3.1 -------------------------------------------------------------------------------------------------------------
# The prediction: Llama-3-8B's 8,030,261,248 gradients, log2|g| ~ Normal(-28, 4), stored in FP16 after scaling
LLAMA8B_PARAMS, PREDICT_MEAN, PREDICT_SD = 8_030_261_248, -28.0, 4.0
PREDICT_FACTOR = 1.3  # the predicted lost fraction passes within this factor of the analytic one


def _normal_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def reference_prediction(n: int, mean: float, sd: float) -> tuple[int, float]:
    """The largest k in 0..60 whose scale 2**k makes the expected number of FP16 overflows (|g| 2^k >= 65520) among
    n gradients with log2|g| ~ Normal(mean, sd) less than one; and the fraction that becomes zero (below 2^-25)
    at that scale."""
    k = max(k for k in range(61) if n * _normal_tail((math.log2(65520) - k - mean) / sd) < 1)
    return k, 1 - _normal_tail((-25 - k - mean) / sd)


def log_normal_grads(n: int, mean_log2: float, sd_log2: float, seed: int) -> torch.Tensor:
    """n gradient-like values: log2 |g| ~ Normal(mean_log2, sd_log2), random signs (float32)."""
    gen = torch.Generator().manual_seed(seed)
    mags = 2.0 ** (mean_log2 + sd_log2 * torch.randn(n, generator=gen, dtype=torch.float64))
    signs = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    return (mags * signs).float()


def reference_flushed(values: torch.Tensor, scale: float) -> float:
    """The fraction of nonzero values that become zero when values x scale is cast to FP16."""
    nz = values[values != 0].double() * scale
    return (nz.to(torch.float16) == 0).double().mean().item()


def expect_flushed(fraction_flushed: Callable, cases: Sequence[tuple[torch.Tensor, float]]) -> None:
    """cases: (values, scale)."""
    fraction_flushed = guarded(fraction_flushed, reference_flushed)
    for values, scale in cases:
        got = fraction_flushed(values.clone(), scale)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, int | float):
            raise CheckFailed("a fraction (a float from 0 to 1)", repr(got))
        want = reference_flushed(values, scale)
        if abs(got - want) > 1e-6:
            raise CheckFailed(f"fraction_flushed(<{values.numel():,} values>, scale={scale:g}) = {want:.6f}",
                              f"{got:.6f}", "multiply by the scale, cast to torch.float16 and count the zeros among "
                              "the values that were nonzero before the cast (exact zeros are not 'lost').")


def check_flushed(prediction: tuple[int, float], reasoning: str, fraction_flushed: Callable) -> Verdict:
    """Exercise 3.1: predict, for Llama-3-8B's 8 billion gradients (no laptop holds them), the largest loss scale
    that overflows none of them on average and the fraction it still loses to zero; then measure on tensors that
    do run."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if not (isinstance(guess, tuple | list) and len(guess) == 2 and isinstance(guess[0], int)
                and not isinstance(guess[0], bool) and isinstance(guess[1], int | float)
                and not isinstance(guess[1], bool) and 0 <= guess[1] <= 1):
            raise CheckFailed("prediction = (k, fraction lost): an int and a fraction from 0 to 1", repr(guess))
        expect_reasoning(reasoning, "3.1")
        k, lost = reference_prediction(LLAMA8B_PARAMS, PREDICT_MEAN, PREDICT_SD)
        if guess[0] != k:
            raise CheckFailed("the largest safe exponent k (the check withholds it)", repr(guess[0]),
                              "overflow starts at 65520 = 2^16 (nearly); with 8 billion draws, 'less than one "
                              "expected overflow' puts the threshold about six standard deviations above the mean.")
        if not lost / PREDICT_FACTOR <= guess[1] <= lost * PREDICT_FACTOR:
            raise CheckFailed(f"a lost fraction within a factor {PREDICT_FACTOR} of the true one (withheld)",
                              repr(guess[1]),
                              "at scale 2^k a gradient becomes zero when log2|g| < -25 - k: a normal tail.")
        gen = torch.Generator().manual_seed(1)
        with_zeros = torch.cat([log_normal_grads(5000, -20, 3, 2), torch.zeros(500)])[torch.randperm(5500,
                                                                                                     generator=gen)]
        expect_flushed(fraction_flushed, [(log_normal_grads(400_000, -28, 4, 0), 2.0**4), (with_zeros, 2.0**8)])

    return run_check("3.1", body, points=2)


# 3.2 -------------------------------------------------------------------------------------------------------------
class _GradScalerReference:
    """The reference: torch.amp.GradScaler behind the learner's interface (scale_value, scale, unscale_(params),
    step(opt, params), update), so that the same scene runs it. GradScaler.unscale_ reads only an optimizer's
    param_groups, and its step calls the optimizer's step: one stand-in per step holds the parameters unscale_ is
    handed and the optimizer step() is handed, so that GradScaler unscales once, as in unscale_(opt); step(opt)."""

    class _Params:
        def __init__(self, params: Any):
            self.param_groups, self.optimizer = [{"params": list(params)}], None

        def step(self, *args: Any, **kwargs: Any) -> Any:
            return self.optimizer.step(*args, **kwargs)

    def __init__(self, init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int):
        self._scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                            backoff_factor=backoff_factor, growth_interval=growth_interval)
        self._params: Any = None

    @property
    def scale_value(self) -> float:
        return self._scaler.get_scale()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self._scaler.scale(loss)

    def _stand_in(self, params: Any) -> Any:
        if self._params is None:
            self._params = self._Params(params)
        return self._params

    def unscale_(self, params: Any) -> None:
        self._scaler.unscale_(self._stand_in(params))

    def step(self, optimizer: torch.optim.Optimizer, params: Any) -> None:
        stand_in = self._stand_in(params)
        stand_in.optimizer = optimizer
        self._scaler.step(stand_in)

    def update(self) -> None:
        self._scaler.update()
        self._params = None


def expect_scaler(scaler_class: type, cases: Sequence[tuple[int, set[int], set[int], float, int, int]]) -> None:
    """cases: (steps, overflow steps, steps that unscale explicitly to clip, init scale, growth interval, seed).
    The training runs in a scene (utils.course.scenes.ch03), once with the learner's class and once with GradScaler
    behind the same interface, and the two are compared."""
    for steps, overflow_at, clip_at, init_scale, interval, seed in cases:
        case = (steps, tuple(sorted(overflow_at)), tuple(sorted(clip_at)), init_scale, interval, seed)
        want = scaler_scene(_GradScalerReference, *case)
        with own_work(torch.amp.GradScaler):
            got = observe(scaler_scene, scaler_class, *case)
        if got["gradscaler"] is not None:
            raise CheckFailed("your own scaler class", f"{got['gradscaler']}, a torch.amp.GradScaler",
                              "the exercise fixes the hand-written scaler; GradScaler is what it is compared with.")
        got_scales, want_scales = got["scales"], want["scales"]
        if got_scales != want_scales:
            first = next(i for i, (a, b) in enumerate(zip(got_scales, want_scales, strict=True)) if a != b)
            raise CheckFailed(f"scale {want_scales[first]:g} at step {first}", f"{got_scales[first]:g}",
                              "update() must use the overflow found by this step's unscale_.")
        got_w, want_w = got["weights"], want["weights"]
        if not torch.allclose(got_w, want_w, rtol=1e-5, atol=1e-7):
            raise CheckFailed("the weights GradScaler's loop reaches (explicit unscale_ for clipping, then step)",
                              f"weights off by up to {(got_w - want_w).abs().max().item():.3g}",
                              "after an explicit unscale_, step() must not divide by the scale a second time; "
                              "without one, step() must unscale.")


def check_scaler(scaler_class: type) -> Verdict:
    """Exercise 3.2: a hand-written scaler that unscales twice when the loop clips, fixed."""
    cases = [(12, {4}, {1, 2, 3, 7, 8}, 2.0**10, 3, 0), (10, set(), set(), 2.0**8, 2, 1)]
    return run_check("3.2", lambda: expect_scaler(answered(scaler_class, "FixedScaler"), cases), points=2)


# 3.3 -------------------------------------------------------------------------------------------------------------
EXPONENTS = range(0, 41)
LLAMA8B_LAYERS = {  # name: (number of gradients, mean and sd of log2|g|): a model-wide gradient census's shape
    "embed_tokens": (525_336_576, -34.0, 3.0), "q_proj": (16_777_216, -27.0, 2.5), "k_proj": (4_194_304, -28.0, 2.5),
    "v_proj": (4_194_304, -24.0, 2.5), "o_proj": (16_777_216, -25.0, 2.5), "gate_proj": (58_720_256, -26.0, 2.5),
    "up_proj": (58_720_256, -25.5, 2.5), "down_proj": (58_720_256, -24.5, 2.5),
    "input_layernorm": (4096, -14.0, 2.0), "lm_head": (525_336_576, -23.0, 3.0)}


def binade_counts(layers: dict[str, tuple[int, float, float]], lo: int, width: int) -> torch.Tensor:
    """Counts per layer (rows) and binade (columns): column j counts the gradients with 2^(lo+j) <= |g| <
    2^(lo+j+1), for log2|g| ~ Normal(mean, sd) (the expected counts, rounded); what a census hook keeps."""
    rows = []
    for n, mean, sd in layers.values():
        cumulative = [round(n * 0.5 * math.erfc(-(lo + j - mean) / sd / math.sqrt(2))) for j in range(width + 1)]
        rows.append([b - a for a, b in zip(cumulative, cumulative[1:], strict=False)])
    return torch.tensor(rows, dtype=torch.int64)


def reference_window(counts: torch.Tensor, lo: int, max_lost: float) -> tuple[int, int] | None:
    """The smallest and largest k in 0..40 for which scale 2**k loses at most max_lost of EACH layer's gradients to
    zero in FP16 (a binade is lost when all of it lies below 2^-25) and can overflow none (the top nonempty binade
    must end at 2^15: binade 2^15 holds 65520 and up); None when no k does."""
    counts = counts.to(torch.float64)
    binade = lo + torch.arange(counts.shape[1])
    totals = counts.sum(dim=1)
    counts, totals = counts[totals > 0], totals[totals > 0]
    top = int(binade[counts.sum(dim=0) > 0].max())
    ok = [k for k in EXPONENTS
          if top + k <= 14 and bool(((counts[:, binade + k <= -26].sum(dim=1) / totals) <= max_lost).all())]
    return (ok[0], ok[-1]) if ok else None


def expect_window(scale_window: Callable, cases: Sequence[tuple[torch.Tensor, int, float]]) -> None:
    """cases: (counts per layer and binade, lo, max_lost)."""
    scale_window = guarded(scale_window, reference_window)
    for counts, lo, max_lost in cases:
        got = scale_window(counts.clone(), lo, max_lost)
        want = reference_window(counts, lo, max_lost)
        if isinstance(got, list):
            got = tuple(got)
        if got != want:
            raise CheckFailed(f"scale_window(<counts of {counts.shape[0]} layers x {counts.shape[1]} binades from "
                              f"2^{lo}>, lo={lo}, max_lost={max_lost:g}) = {want}", repr(got),
                              "a binade [2^b, 2^(b+1)) scaled by 2^k is all zero in FP16 when b + k + 1 <= -25, and "
                              "can overflow when b + k >= 15 (65520 lies in binade 15); the tolerance holds for "
                              "every layer, not for the total; return None when no k in 0..40 works.")


def check_window(scale_window: Callable) -> Verdict:
    """Exercise 3.3: one loss scale for a whole Llama-3-8B, from per-layer binade counts (not the gradients)."""
    counts = binade_counts(LLAMA8B_LAYERS, -64, 72)
    return run_check("3.3", lambda: expect_window(scale_window, [(counts, -64, 1e-3), (counts, -64, 0.2)]),
                     points=2)


# 3.4 -------------------------------------------------------------------------------------------------------------
def _reference_loop(model, opt, sched, scaler, batches, after_backward, accum, max_norm) -> list[bool]:
    taken = []
    stepped: list[bool] = []
    handle = opt.register_step_post_hook(lambda *_: stepped.append(True))  # runs only when the optimizer steps
    try:
        for start in range(0, len(batches), accum):
            group = range(start, min(start + accum, len(batches)))  # the last group may be shorter
            for i in group:
                xb, yb = batches[i]
                scaler.scale(torch.nn.functional.mse_loss(model(xb), yb) / len(group)).backward()
                after_backward(i)
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            stepped.clear()
            scaler.step(opt)
            scaler.update()
            if stepped:
                sched.step()
            opt.zero_grad(set_to_none=True)
            taken.append(bool(stepped))
    finally:
        handle.remove()
    return taken


def expect_loop(train_loop: Callable, cases: Sequence[tuple[set[int], str, int, int, float]]) -> None:
    """cases: (batches whose gradients overflow, "step" or "lambda" scheduler, seed, accumulation steps, max_norm);
    12 batches, so an `accum` that does not divide 12 leaves a last, shorter group. The learner may not ask the
    scaler for its scale (get_scale: a host sync per call).
    The loop runs in a scene (utils.course.scenes.ch03), once with the learner's loop and once with the reference,
    and the two are compared."""
    train_loop = guarded(train_loop, _reference_loop)
    for overflow_at, lr_kind, seed, accum, max_norm in cases:
        case = (tuple(sorted(overflow_at)), lr_kind, seed, accum, max_norm)
        want = loop_scene(_reference_loop, *case)
        got = observe(loop_scene, train_loop, *case)
        want_steps, want_lr, want_w, want_scale = (want[k] for k in ("steps", "lr", "weights", "scale"))
        got_steps, got_lr, got_w, warned, got_scale = (got[k] for k in ("steps", "lr", "weights", "warned", "scale"))
        what = f"(accum={accum}, max_norm={max_norm:g}, overflows in batches {sorted(overflow_at)})"
        if got_steps is None or got_steps != want_steps:
            raise CheckFailed(f"one entry per optimizer step, {want_steps} {what}", got["returned"],
                              "one scaler.step/update per group of `accum` batches, the last, shorter group "
                              "included; whether the optimizer really stepped, the optimizer itself can tell you "
                              "(a hook), without asking the scaler.")
        if got["asked"]:
            raise CheckFailed("a loop that never asks the scaler for its scale", f"{got['asked']} calls of get_scale()",
                              "each is a host sync: the optimizer knows whether it stepped (a step hook runs only "
                              "when it does).")
        if got_scale != want_scale:
            raise CheckFailed(f"the scale {want_scale:g} at the end {what}", f"{got_scale:g}",
                              "update() belongs once per optimizer step, after scaler.step.")
        if warned:
            raise CheckFailed("no scheduler warning", "the 'lr_scheduler.step() before optimizer.step()' warning",
                              "step the scheduler only after a step the optimizer really took.")
        if not math.isclose(got_lr, want_lr, rel_tol=1e-9):
            raise CheckFailed(f"learning rate {want_lr:.6g} at the end {what}", f"{got_lr:.6g}",
                              "the schedule advances once per optimizer step taken, not per batch.")
        if not torch.allclose(got_w, want_w, rtol=1e-5, atol=1e-7):
            raise CheckFailed(f"the weights of a correct loop {what}", "other weights",
                              "a micro-batch's loss is divided by the size of its group (the last may be shorter); "
                              "clipping must see unscaled gradients (scaler.unscale_(opt) first), then scaler.step "
                              "and update.")


def check_loop(train_loop: Callable) -> Verdict:
    """Exercise 3.4: a colleague's loop (accumulation, clipping, scheduler, GradScaler) with planted bugs, fixed."""
    return run_check("3.4", lambda: expect_loop(train_loop, [({1}, "step", 0, 2, 1.0), ({0, 1, 7}, "step", 1, 5, 50.0),
                                                             (set(), "lambda", 2, 4, 2.0)]), points=2)


# 3.5 -------------------------------------------------------------------------------------------------------------
FORMATS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e5m2": torch.float8_e5m2}


def reference_format_plan(grads: torch.Tensor, max_lost: float, fmt: str) -> tuple[tuple[int, int] | None, bool]:
    """The window of power-of-two scales 2**k, k in -40..40, that lose at most max_lost of the nonzero values to
    zero in `fmt` and overflow none; and whether scaling is needed (1 = 2**0 is not in the window)."""
    nz = grads[grads != 0].double()
    ok = [k for k in range(-40, 41)
          if ((cast := (nz * 2.0**k).to(FORMATS[fmt])) == 0).double().mean().item() <= max_lost
          and bool(torch.isfinite(cast).all())]
    window = (ok[0], ok[-1]) if ok else None
    return window, window is None or not window[0] <= 0 <= window[1]


def expect_format_plans(format_plan: Callable, cases: Sequence[tuple[torch.Tensor, float, str]]) -> None:
    """cases: (gradients, max_lost, format)."""
    format_plan = guarded(format_plan, reference_format_plan, reference_window)
    for grads, max_lost, fmt in cases:
        want = reference_format_plan(grads, max_lost, fmt)
        got = format_plan(grads.clone(), max_lost, fmt)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], list):
            got = (tuple(got[0]), got[1])
        if got != want:
            hint = {"fp16": "FP16: values below 2^-25 become zero, from 65520 on infinity.",
                    "bf16": "BF16 has FP32's exponent range: it loses almost nothing to underflow at scale 1, so it "
                            "needs no scaling, and huge scales still fit.",
                    "fp8_e5m2": "E5M2 has FP16's exponent range (5 bits) but 2 mantissa bits: zero below 2^-17 "
                                "(half its smallest subnormal 2^-16), infinity above 57344 + half a spacing."}[fmt]
            raise CheckFailed(f"format_plan(<{grads.numel():,} gradients>, max_lost={max_lost:g}, {fmt!r}) = {want}",
                              repr(got), hint + " Scale exponents run from -40 to 40 (a scale below 1 is allowed).")


def check_format_plan(format_plan: Callable) -> Verdict:
    """Exercise 3.5: the chapter's scale window carried to BF16 and FP8 E5M2 gradients, and the decision whether a
    format needs loss scaling at all."""
    grads = log_normal_grads(20_000, -22, 3, 31)
    return run_check("3.5", lambda: expect_format_plans(format_plan, [(grads, 0.01, "fp8_e5m2"), (grads, 0.01, "bf16"),
                                                                      (grads * 2.0**12, 0.001, "fp16")]), points=2)
