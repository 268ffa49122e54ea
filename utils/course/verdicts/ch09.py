"""Chapter 09's claim verdicts (C08, C09, C10, C29, C30), computed from the chapter's measurements and ledger."""

from __future__ import annotations

from collections.abc import Mapping

from utils.course.verdicts import Judged, judge, verdict
from utils.validate import check_number

GB = 1e9


def _off(value: float, claimed: float) -> float:
    """Relative distance of `value` from `claimed`."""
    return abs(value - claimed) / claimed


C08_CRITERION = ("each of the claim's three figures (FP32 weights 28 GB, BF16 weights 14 GB, Adam's states 84 GB, "
                 "all for 7.0B parameters; the states as the claim's source counts them, an FP32 master copy plus "
                 "the two moments) is compared with the bytes per parameter measured here times 7.0B: "
                 "holds if all three are within 10%, partly if some are, fails if none is")


@judge("C08", criterion=C08_CRITERION, examples=[
    {"fp32_weight_bytes": 4, "bf16_weight_bytes": 2, "adam_state_bytes": 12.0},
    {"fp32_weight_bytes": 4, "bf16_weight_bytes": 2, "adam_state_bytes": 8.0},
    {"fp32_weight_bytes": 8, "bf16_weight_bytes": 4, "adam_state_bytes": 2.0},
])
def c08(fp32_weight_bytes: float, bf16_weight_bytes: float, adam_state_bytes: float) -> Judged:
    """Bytes per parameter measured for FP32 weights, BF16 weights and AdamW's states, against 28/14/84 GB."""
    figures = {"FP32 weights": (check_number("fp32_weight_bytes", fp32_weight_bytes, positive=True), 28),
               "BF16 weights": (check_number("bf16_weight_bytes", bf16_weight_bytes, positive=True), 14),
               "Adam states": (check_number("adam_state_bytes", adam_state_bytes, positive=True), 84)}
    near = {name: _off(per_param * 7.0, gb) <= 0.10 for name, (per_param, gb) in figures.items()}
    detail = "; ".join(f"{name} {per_param * 7.0:.0f} GB against {gb} ({'within' if near[name] else 'outside'} 10%)"
                       for name, (per_param, gb) in figures.items())
    name = "holds" if all(near.values()) else "partly" if any(near.values()) else "fails"
    return verdict(name, C08_CRITERION, detail)


C09_CRITERION = ("the claim's 112-114 GB is 16 B/param of model states for 7.0B parameters (112 GB) plus about "
                 "2 GB of activations; like is compared with like: holds if the measured model states are within "
                 "10% of 16 B/param and the setup's activations within 2x of 2 GB, partly if only the states "
                 "agree (the total then depends on batch and sequence length), fails if the states do not")


@judge("C09", criterion=C09_CRITERION, examples=[
    {"state_bytes_per_param": 16.0, "activation_gb": 2.0},
    {"state_bytes_per_param": 16.0, "activation_gb": 18.0},
    {"state_bytes_per_param": 12.0, "activation_gb": 2.0},
])
def c09(state_bytes_per_param: float, activation_gb: float) -> Judged:
    """Model-state bytes per parameter and the activations (GB) of the setup, each against its share of the claim."""
    check_number("state_bytes_per_param", state_bytes_per_param, positive=True)
    check_number("activation_gb", activation_gb, minimum=0.0)
    states_agree = _off(state_bytes_per_param, 16) <= 0.10
    acts_agree = 1.0 <= activation_gb <= 4.0
    detail = (f"model states {state_bytes_per_param:.1f} B/param = {state_bytes_per_param * 7.0:.0f} GB for 7.0B "
              f"against 112; activations {activation_gb:.1f} GB against about 2")
    name = ("holds" if states_agree and acts_agree else "partly" if states_agree else "fails")
    return verdict(name, C09_CRITERION, detail)


C10_CRITERION = ("the trainable count is compared with 20M and the memory with 14.3 GB: holds if both are within "
                 "10%, partly if one is, fails if neither")


@judge("C10", criterion=C10_CRITERION, examples=[
    {"trainable": 20.0e6, "total_bytes": 14.3e9},
    {"trainable": 16.8e6, "total_bytes": 15.1e9},
    {"trainable": 4.0e6, "total_bytes": 40e9},
])
def c10(trainable: float, total_bytes: float) -> Judged:
    """LoRA r=16 on the attention of a 7B model: trainable parameters and the ledger's bytes."""
    check_number("trainable", trainable, positive=True)
    check_number("total_bytes", total_bytes, positive=True)
    count_ok, memory_ok = _off(trainable, 20e6) <= 0.10, _off(total_bytes / GB, 14.3) <= 0.10
    detail = (f"{trainable / 1e6:.1f}M trainable ({100 * (trainable / 20e6 - 1):+.0f}% from 20M), "
              f"{total_bytes / GB:.1f} GB ({100 * (total_bytes / GB / 14.3 - 1):+.0f}% from 14.3)")
    name = "holds" if count_ok and memory_ok else "partly" if count_ok or memory_ok else "fails"
    return verdict(name, C10_CRITERION, detail)


C29_CRITERION = ("doubling the sequence length: holds if SDPA's saved activations grow at most 2.2x (linear) while "
                 "eager attention's grow more (its T x T matrices); partly if both stay within 2.2x (the quadratic "
                 "term is too small at this size to tell them apart); fails if SDPA grows more than 2.2x")


@judge("C29", criterion=C29_CRITERION, examples=[
    {"growth_eager": 2.35, "growth_sdpa": 2.0},
    {"growth_eager": 2.05, "growth_sdpa": 2.0},
    {"growth_eager": 3.5, "growth_sdpa": 3.4},
])
def c29(growth_eager: float, growth_sdpa: float) -> Judged:
    """Growth factors of saved activations when the sequence doubles, eager attention and SDPA."""
    check_number("growth_eager", growth_eager, positive=True)
    check_number("growth_sdpa", growth_sdpa, positive=True)
    detail = f"x{growth_eager:.2f} eager, x{growth_sdpa:.2f} SDPA"
    if growth_sdpa > 2.2:
        return verdict("fails", C29_CRITERION, detail)
    return verdict("holds" if growth_eager > 2.2 else "partly", C29_CRITERION, detail)


C30_CRITERION = ("each measured or ledger factor (a starting point's bytes over a combination's) is compared with "
                 "4-8x: holds if every factor lies in [4, 8], fails if every factor is below 4, depends otherwise "
                 "(the factor is set by the starting point)")


@judge("C30", criterion=C30_CRITERION, examples=[
    {"factors": {"a": 5.0, "b": 7.5}},
    {"factors": {"a": 3.4, "b": 11.0, "c": 35.0}},
    {"factors": {"a": 1.5, "b": 2.0}},
])
def c30(factors: Mapping[str, float]) -> Judged:
    """Memory reduction factors of combined techniques, each from a named starting point."""
    if not isinstance(factors, Mapping) or not factors:
        raise TypeError("factors must be a non-empty mapping of label -> reduction factor")
    values = {str(k): check_number(f"factors[{k!r}]", v, positive=True) for k, v in factors.items()}
    detail = "factors " + ", ".join(f"{k}: {v:.1f}x" for k, v in values.items())
    if all(4 <= v <= 8 for v in values.values()):
        return verdict("holds", C30_CRITERION, detail)
    if all(v < 4 for v in values.values()):
        return verdict("fails", C30_CRITERION, detail)
    return verdict("depends", C30_CRITERION, detail)
