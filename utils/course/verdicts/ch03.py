"""Verdicts of chapter 03 (loss scaling): claims C14, C15 and C16, judged on this run's measurements."""

from __future__ import annotations

import math

from utils.course.verdicts import Judged, judge, verdict

COMMON = 0.01  # "common": at least 1% of the nonzero gradients
C14_CRITERION = (f"'common' holds when at least {COMMON:.0%} of the sampled nonzero gradients lie below 1e-10; "
                 "'saves it' holds when 1e-10 x 1024 is stored nonzero in FP16; holds if both parts hold, "
                 "partly if one, fails if none")


@judge("C14", criterion=C14_CRITERION, examples=[
    {"fraction_below": 0.05, "scaled_in_fp16": 1.19e-7},
    {"fraction_below": 0.001, "scaled_in_fp16": 1.19e-7},
    {"fraction_below": 0.001, "scaled_in_fp16": 0.0}])
def c14(fraction_below: float, scaled_in_fp16: float) -> Judged:
    """C14: gradients below 1e-10 are common; a loss scale of 1024 turns 1e-10 into 1e-7 and saves it."""
    common = fraction_below >= COMMON
    saved = scaled_in_fp16 != 0 and math.isfinite(scaled_in_fp16)
    off = abs(scaled_in_fp16 - 1.024e-7) / 1.024e-7
    name = "holds" if common and saved else "partly" if common or saved else "fails"
    return verdict(name, C14_CRITERION,
                   f"{fraction_below:.3%} below 1e-10 ({'common' if common else 'not common'}); 1e-10 x 1024 "
                   f"stores as {scaled_in_fp16:.3g} ({'saved' if saved else 'lost'}, {off:.0%} off 1.024e-7)")


CLAIMED_C15 = {"init_scale": 2.0**24, "backoff_factor": 0.5, "growth_factor": 2.0, "growth_interval": 2000}
C15_CRITERION = ("compares torch.amp.GradScaler's defaults with the claim's figures (start 2^24, x0.5 on overflow, "
                 "x2 after 2000 clean steps): holds if all four agree, partly if the mechanism (x0.5, x2, 2000) "
                 "agrees and the start differs, fails if the mechanism differs")


@judge("C15", criterion=C15_CRITERION, examples=[
    {"init_scale": 2.0**24, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
    {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
    {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 1000}])
def c15(init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int) -> Judged:
    """C15: dynamic loss scaling starts high (2^24), halves on overflow, doubles after 2000 clean steps."""
    measured = {"init_scale": init_scale, "backoff_factor": backoff_factor, "growth_factor": growth_factor,
                "growth_interval": growth_interval}
    differ = [k for k, v in CLAIMED_C15.items() if measured[k] != v]
    mechanism = not [k for k in differ if k != "init_scale"]
    name = "holds" if not differ else "partly" if mechanism else "fails"
    detail = "all four agree" if not differ else "differs: " + ", ".join(
        f"{k} {_figure(k, measured[k])} (claim {_figure(k, CLAIMED_C15[k])})" for k in differ)
    return verdict(name, C15_CRITERION, detail)


def _figure(name: str, value: float) -> str:
    """A scale as a power of two where it is one (2^16), anything else as a number."""
    if name == "init_scale" and value > 0 and math.log2(value).is_integer():
        return f"2^{int(math.log2(value))}"
    return f"{value:g}"


LOST = 1e-4  # "needs no scaling": under 0.01% of the gradients lost to underflow
C16_CRITERION = (f"holds when BF16 without scaling loses under {LOST:.2%} of the gradients to underflow (the "
                 "largest fraction over a real backward's parameter gradients, zero where FP32's are not, and casts "
                 "of sampled parameter and activation gradients) and BF16 training without a scaler ends within "
                 "the seed-to-seed spread of the same training with GradScaler (|difference of mean final "
                 "losses| <= the larger standard deviation over seeds); partly if one of the two holds, fails "
                 "if neither")


@judge("C16", criterion=C16_CRITERION, examples=[
    {"bf16_lost": 0.0, "fp16_lost": 0.007, "loss_gap": 0.001, "seed_spread": 0.02},
    {"bf16_lost": 0.0, "fp16_lost": 0.007, "loss_gap": 0.1, "seed_spread": 0.02},
    {"bf16_lost": 0.01, "fp16_lost": 0.007, "loss_gap": 0.1, "seed_spread": 0.02}])
def c16(bf16_lost: float, fp16_lost: float, loss_gap: float, seed_spread: float) -> Judged:
    """C16: BF16 training needs no loss scaling."""
    range_ok = bf16_lost < LOST
    training_ok = loss_gap <= seed_spread
    name = "holds" if range_ok and training_ok else "partly" if range_ok or training_ok else "fails"
    return verdict(name, C16_CRITERION, f"lost to underflow unscaled: BF16 {bf16_lost:.4%}, FP16 {fp16_lost:.4%}; "
                   f"final-loss gap without vs with a scaler {loss_gap:.4f}, seed spread {seed_spread:.4f}")
