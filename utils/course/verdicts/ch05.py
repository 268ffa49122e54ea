"""Chapter 05's claim verdicts (gradient checkpointing): C06, C07, C20, C21, C22, C23, C29."""

from __future__ import annotations

from collections.abc import Mapping

from utils.course.verdicts import Judged, judge, verdict
from utils.course.verdicts.ch01 import c06, c07  # one criterion per claim: chapter 01's, judged again here
from utils.validate import check_number

C20_CRITERION = ("holds if the saved bytes grow with depth at slope >= 0.9 without checkpointing and at a slope "
                 "between 0.3 and 0.75 with sqrt(N) segments; fails otherwise")
C21_CRITERION = ("holds if one checkpoint per transformer layer adds 20-40% FLOPs (counted on the course's GPT layer, "
                 "attention and MLP) and one checkpoint per block 20-45% step time (median of the timed repeats); "
                 "partly if only the FLOPs are in 20-40%; fails if the FLOPs are not")
C22_CRITERION = ("holds if 20 segments of 100 blocks cut the activation peak by 75-85% (about 80%); partly if they "
                 "cut more (blocks that save several times their input); fails if they cut less than 75%")
C23_CRITERION = ("holds if every measured cut of one checkpoint per layer lies in 50-80%; partly if every cut is "
                 "at least 50% but some exceed 80%; fails if a cut is below 50%")
C29_CRITERION = ("holds if SDPA's saved bytes grow with sequence length at a log-log slope below 1.15 while eager "
                 "attention's is at least 0.3 higher; fails otherwise")


@judge("C20", criterion=C20_CRITERION, examples=[{"plain_slope": 1.0, "sqrt_slope": 0.5},
                                                 {"plain_slope": 1.0, "sqrt_slope": 0.95}])
def c20(plain_slope: float, sqrt_slope: float) -> Judged:
    """C20 from the log-log slopes of saved bytes against depth, plain and with sqrt(N) segments."""
    check_number("plain_slope", plain_slope)
    check_number("sqrt_slope", sqrt_slope)
    ok = plain_slope >= 0.9 and 0.3 <= sqrt_slope <= 0.75
    return verdict("holds" if ok else "fails", C20_CRITERION,
                   f"slopes {plain_slope:.2f} plain, {sqrt_slope:.2f} with sqrt(N) segments; one checkpoint per "
                   "block stays O(N)")


@judge("C21", criterion=C21_CRITERION, examples=[
    {"flop_overhead": 0.33, "time_overhead": 0.35, "time_spread": 0.05},
    {"flop_overhead": 0.33, "time_overhead": 1.5, "time_spread": 0.1},
    {"flop_overhead": 1.0, "time_overhead": 1.0, "time_spread": 0.1}])
def c21(flop_overhead: float, time_overhead: float, time_spread: float) -> Judged:
    """C21 from the counted FLOP overhead, the measured median step-time overhead and its spread (fractions, 0.33 =
    33%; the spread is reported, the verdict reads the median)."""
    check_number("flop_overhead", flop_overhead)
    check_number("time_overhead", time_overhead)
    check_number("time_spread", time_spread, minimum=0)
    detail = f"FLOPs +{flop_overhead:.0%}, step time {time_overhead:+.0%} (spread {time_spread:.0%})"
    if not 0.2 <= flop_overhead <= 0.4:
        return verdict("fails", C21_CRITERION, detail)
    if 0.2 <= time_overhead <= 0.45:
        return verdict("holds", C21_CRITERION, detail)
    return verdict("partly", C21_CRITERION, detail + ": the FLOPs agree; the time depends on how much of the step "
                   "is bandwidth- or overhead-bound work that recomputation repeats")


@judge("C22", criterion=C22_CRITERION, examples=[{"cut": 0.8}, {"cut": 0.93}, {"cut": 0.6}])
def c22(cut: float) -> Judged:
    """C22 from the measured cut of the activation peak with 20 segments of 100 blocks (a fraction)."""
    check_number("cut", cut, maximum=1)
    detail = f"cut {cut:.0%}"
    if 0.75 <= cut <= 0.85:
        return verdict("holds", C22_CRITERION, detail)
    return verdict("partly" if cut > 0.85 else "fails", C22_CRITERION, detail)


@judge("C23", criterion=C23_CRITERION, examples=[{"cuts": {"a": 0.6, "b": 0.75}}, {"cuts": {"a": 0.9, "b": 0.95}},
                                                 {"cuts": {"a": 0.3}}])
def c23(cuts: Mapping[str, float]) -> Judged:
    """C23 from the measured cuts (fractions) of one checkpoint per layer, one per model."""
    if not isinstance(cuts, Mapping) or not cuts:
        raise TypeError("cuts must be a non-empty mapping of model name -> cut (a fraction)")
    for name, cut in cuts.items():
        check_number(f"cuts[{name!r}]", cut, maximum=1)
    detail = ", ".join(f"{name} {cut:.0%}" for name, cut in cuts.items())
    if all(0.5 <= c <= 0.8 for c in cuts.values()):
        return verdict("holds", C23_CRITERION, detail)
    if all(c >= 0.5 for c in cuts.values()):
        return verdict("partly", C23_CRITERION, detail + ": the cut is about 1 - 1/c, so blocks that save c >> 5 "
                       "times their input lose more than 80%")
    return verdict("fails", C23_CRITERION, detail)


@judge("C29", criterion=C29_CRITERION, examples=[{"eager_slope": 1.6, "sdpa_slope": 1.0},
                                                 {"eager_slope": 1.9, "sdpa_slope": 1.9}])
def c29(eager_slope: float, sdpa_slope: float) -> Judged:
    """C29 from the log-log slopes of saved bytes against sequence length (eager and SDPA attention)."""
    check_number("eager_slope", eager_slope)
    check_number("sdpa_slope", sdpa_slope)
    ok = sdpa_slope < 1.15 and eager_slope >= sdpa_slope + 0.3
    return verdict("holds" if ok else "fails", C29_CRITERION,
                   f"slopes: SDPA {sdpa_slope:.2f}, eager {eager_slope:.2f}; compute stays quadratic")


__all__ = ["c06", "c07", "c20", "c21", "c22", "c23", "c29"]
