"""Chapter 01's claim verdicts (where the memory goes): C01 to C09.

Each function takes what the chapter measured (or computed from its estimator, for sizes no CPU can run) and
compares it with the claim's figure under the criterion stated beside it. Chapter 05 judges C06 and C07 again on
its own measurements with the same thresholds.
"""

from __future__ import annotations

from collections.abc import Mapping

from utils.course.verdicts import Judged, judge, verdict
from utils.validate import check_number

BPP_TOLERANCE = 0.5  # bytes per parameter: Adam's 4-byte step counters and biases add hundredths, never halves
C01_CRITERION = "holds if FP32 + AdamW measures 16 +- 0.5 bytes per parameter before activations; fails otherwise"
C02_CRITERION = ("holds if the regime the claim describes (half weights and gradients + FP32 master weights + two "
                 "FP32 moments) measures 16 +- 0.5 B/param; fails otherwise")
C03_CRITERION = ("holds if both mixed-precision regimes hold 18 +- 0.5 B/param with every parameter-sized tensor "
                 "alive (weights, gradients, master copy, moments: the optimizer step); depends if only the "
                 "half-weights + FP32-master regime with FP32 gradients does (torch.amp holds 16); fails if neither")
C04_LOW, C04_HIGH = 0.20, 0.30
C04_CRITERION = ("holds if the step's peak exceeds weights + gradients + optimizer states by 20-30% in every "
                 "realistic configuration judged; partly if in some; fails if in none")
C05_SHARE = 0.90
C05_CRITERION = ("a 'can' claim: holds if some configuration that fits the GPU judged, without checkpointing, has "
                 "activations above 90% of weights + gradients + states + activations; fails if none does")
C06_CRITERION = "holds if the saved bytes grow by the batch ratio within 5%; fails otherwise"
C07_CRITERION = ("holds if the measured attention activations (chapter 01: the attention core's saved bytes, outside "
                 "its qkv and output Linear layers; chapter 05: a one-layer GPT's) grow with sequence length at a "
                 "log-log slope >= 1.8 with eager attention and with SDPA; depends if only eager attention's slope "
                 "is >= 1.3; fails if eager's is below 1.3 (the thresholds of chapter 05)")
ARITH_TOLERANCE = 0.05
C08_CRITERION = ("each of the claim's figures (FP32 weights, 16-bit weights, Adam states, the last counted as the "
                 "claim's source counts it: FP32 master copy + two moments, ZeRO's K = 12) holds if it is within 5% of "
                 "bytes per parameter x 7e9 computed here; holds if all do, partly if some do, fails if none does")
C09_CRITERION = ("holds if weights + gradients + Adam states (16 B/param x 7e9) and the total with one sequence's "
                 "activations both lie within 5% of 112-114 GB; partly if only the states do; fails otherwise")


def _bpp(name: str, value: float) -> float:
    check_number(name, value, minimum=0)
    return float(value)


def _near(value: float, target: float) -> bool:
    return abs(value - target) <= BPP_TOLERANCE


@judge("C01", criterion=C01_CRITERION, examples=[{"bytes_per_param": 16.0}, {"bytes_per_param": 12.0}])
def c01(bytes_per_param: float) -> Judged:
    """C01 from the measured bytes per parameter of FP32 weights, gradients and AdamW's states."""
    bpp = _bpp("bytes_per_param", bytes_per_param)
    return verdict("holds" if _near(bpp, 16) else "fails", C01_CRITERION)


@judge("C02", criterion=C02_CRITERION, examples=[{"master_half_grads": 16.0, "torch_amp": 16.0},
                                                 {"master_half_grads": 18.0, "torch_amp": 16.0}])
def c02(master_half_grads: float, torch_amp: float) -> Judged:
    """C02 from the persistent bytes per parameter of the half-weights + FP32-master regime (half gradients),
    with torch.amp's figure reported beside it."""
    master, amp = _bpp("master_half_grads", master_half_grads), _bpp("torch_amp", torch_amp)
    detail = ("torch.amp reaches the same total from FP32 weights and gradients, with no half copy kept between "
              "steps" if _near(amp, 16) else f"torch.amp keeps {amp:.2f}")
    return verdict("holds" if _near(master, 16) else "fails", C02_CRITERION, detail)


@judge("C03", criterion=C03_CRITERION, examples=[{"master_fp32_grads": 18.0, "torch_amp": 18.0},
                                                 {"master_fp32_grads": 18.0, "torch_amp": 16.0},
                                                 {"master_fp32_grads": 16.0, "torch_amp": 16.0}])
def c03(master_fp32_grads: float, torch_amp: float) -> Judged:
    """C03 from the persistent bytes per parameter of the FP32-gradient master regime and of torch.amp."""
    master, amp = _bpp("master_fp32_grads", master_fp32_grads), _bpp("torch_amp", torch_amp)
    if _near(master, 18) and _near(amp, 18):
        return verdict("holds", C03_CRITERION)
    if _near(master, 18):
        return verdict("depends", C03_CRITERION, "18 is the regime that accumulates gradients in FP32 beside half "
                       f"weights (Megatron's main_grad); torch.amp keeps {amp:.2f}")
    return verdict("fails", C03_CRITERION, f"{master:.2f} and {amp:.2f} B/param")


@judge("C04", criterion=C04_CRITERION, examples=[{"overheads": {"a": 0.25, "b": 0.22}},
                                                 {"overheads": {"a": 0.25, "b": 1.60}},
                                                 {"overheads": {"a": 1.10, "b": 3.50}}])
def c04(overheads: Mapping[str, float]) -> Judged:
    """C04 from {configuration: (step peak - weights - gradients - states) / (weights + gradients + states)}."""
    if not isinstance(overheads, Mapping) or not overheads:
        raise TypeError("overheads must be a non-empty mapping of configuration name to overhead fraction")
    for name, value in overheads.items():
        check_number(f"overheads[{name!r}]", value)
    inside = [name for name, value in overheads.items() if C04_LOW <= value <= C04_HIGH]
    if len(inside) == len(overheads):
        return verdict("holds", C04_CRITERION)
    if inside:
        return verdict("partly", C04_CRITERION, f"inside 20-30%: {', '.join(inside)}; the overhead grows with "
                       "batch x sequence against a fixed 16 B/param")
    return verdict("fails", C04_CRITERION, "; ".join(f"{name}: {value:+.0%}" for name, value in overheads.items()))


@judge("C05", criterion=C05_CRITERION, examples=[{"shares": {"small model, large batch": 0.93, "7B": 0.25}},
                                                 {"shares": {"7B": 0.25, "1.3B": 0.61}}])
def c05(shares: Mapping[str, float]) -> Judged:
    """C05 from {configuration that fits the GPU: activations' share of weights + gradients + states +
    activations}."""
    if not isinstance(shares, Mapping) or not shares:
        raise TypeError("shares must be a non-empty mapping of configuration name to activation share")
    for name, value in shares.items():
        check_number(f"shares[{name!r}]", value, minimum=0, maximum=1)
    above = [name for name, value in shares.items() if value > C05_SHARE]
    if above:
        return verdict("holds", C05_CRITERION, f"above 90%: {', '.join(above)}; checkpointing or a small batch "
                       "reverses it")
    return verdict("fails", C05_CRITERION, ", ".join(f"{name}: {value:.0%}" for name, value in shares.items()))


@judge("C06", criterion=C06_CRITERION, examples=[{"ratio": 4.0, "batch_ratio": 4.0},
                                                 {"ratio": 3.0, "batch_ratio": 4.0}])
def c06(ratio: float, batch_ratio: float) -> Judged:
    """C06 from the ratio of saved bytes between two batches and the ratio of the batches."""
    check_number("ratio", ratio, minimum=0)
    check_number("batch_ratio", batch_ratio, minimum=0)
    if batch_ratio == 0:
        raise ValueError("batch_ratio must be positive")
    ok = abs(ratio / batch_ratio - 1) <= 0.05
    return verdict("holds" if ok else "fails", C06_CRITERION, "activations only: total memory does not scale so, "
                   "weights and states are fixed")


@judge("C07", criterion=C07_CRITERION, examples=[{"eager_slope": 1.9, "sdpa_slope": 1.9},
                                                 {"eager_slope": 1.55, "sdpa_slope": 1.0},
                                                 {"eager_slope": 1.0, "sdpa_slope": 1.0}])
def c07(eager_slope: float, sdpa_slope: float) -> Judged:
    """C07 from the log-log slopes of measured attention activations against sequence length."""
    check_number("eager_slope", eager_slope)
    check_number("sdpa_slope", sdpa_slope)
    if eager_slope >= 1.8 and sdpa_slope >= 1.8:
        return verdict("holds", C07_CRITERION)
    if eager_slope >= 1.3:
        return verdict("depends", C07_CRITERION, "quadratic only where the T x T probabilities are saved (eager "
                       "attention, or SDPA's math fallback), and only once T passes about 16 times the head width; "
                       "SDPA's fused kernels save no T x T matrix")
    return verdict("fails", C07_CRITERION, f"slopes: eager {eager_slope:.2f}, SDPA {sdpa_slope:.2f}")


def _within(claimed: float, computed: float) -> bool:
    return abs(claimed - computed) <= ARITH_TOLERANCE * computed


@judge("C08", criterion=C08_CRITERION,
       examples=[{"claimed_gb": {"FP32 weights": 28, "BF16 weights": 14, "Adam states": 56},
                  "computed_gb": {"FP32 weights": 28, "BF16 weights": 14, "Adam states": 56}},
                 {"claimed_gb": {"FP32 weights": 28, "BF16 weights": 14, "Adam states": 84},
                  "computed_gb": {"FP32 weights": 28, "BF16 weights": 14, "Adam states": 56}},
                 {"claimed_gb": {"FP32 weights": 40}, "computed_gb": {"FP32 weights": 28}}])
def c08(claimed_gb: Mapping[str, float], computed_gb: Mapping[str, float]) -> Judged:
    """C08 from the claim's figures and the computed ones (decimal GB), item by item."""
    if not isinstance(claimed_gb, Mapping) or not isinstance(computed_gb, Mapping) or not claimed_gb:
        raise TypeError("claimed_gb and computed_gb must be mappings of item name to GB")
    missing = set(claimed_gb) - set(computed_gb)
    if missing:
        raise ValueError(f"computed_gb lacks {sorted(missing)}")
    ok = {name: _within(claimed_gb[name], computed_gb[name]) for name in claimed_gb}
    detail = "; ".join(f"{name} {claimed_gb[name]:g} GB {'within' if good else 'outside'} 5% of "
                       f"{computed_gb[name]:.1f}" for name, good in ok.items())
    name = "holds" if all(ok.values()) else "partly" if any(ok.values()) else "fails"
    return verdict(name, C08_CRITERION, detail)


@judge("C09", criterion=C09_CRITERION,
       examples=[{"claimed_low_gb": 112, "claimed_high_gb": 114, "states_gb": 112, "activations_gb": 1},
                 {"claimed_low_gb": 112, "claimed_high_gb": 114, "states_gb": 112, "activations_gb": 35},
                 {"claimed_low_gb": 112, "claimed_high_gb": 114, "states_gb": 84, "activations_gb": 1}])
def c09(claimed_low_gb: float, claimed_high_gb: float, states_gb: float, activations_gb: float) -> Judged:
    """C09 from the claim's range, the computed weights + gradients + Adam states, and one sequence's
    activations (decimal GB)."""
    for name, value in (("claimed_low_gb", claimed_low_gb), ("claimed_high_gb", claimed_high_gb),
                        ("states_gb", states_gb), ("activations_gb", activations_gb)):
        check_number(name, value, minimum=0)
    if claimed_high_gb < claimed_low_gb:
        raise ValueError("claimed_high_gb must be at least claimed_low_gb")

    def in_range(x: float) -> bool:
        return claimed_low_gb * (1 - ARITH_TOLERANCE) <= x <= claimed_high_gb * (1 + ARITH_TOLERANCE)

    total = states_gb + activations_gb
    detail = f"with one sequence's activations {total:.0f} GB"
    if in_range(states_gb) and in_range(total):
        return verdict("holds", C09_CRITERION, detail)
    if in_range(states_gb):
        return verdict("partly", C09_CRITERION, detail + ": the figure counts weights, gradients and Adam only; "
                       "activations come on top and grow with batch x sequence")
    return verdict("fails", C09_CRITERION, detail)
