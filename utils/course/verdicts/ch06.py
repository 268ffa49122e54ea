"""Chapter 06's claim verdicts (gradient accumulation): C24, C25."""

from __future__ import annotations

from utils.course.verdicts import Judged, judge, verdict
from utils.validate import check_int, check_number

C24_CRITERION = ("holds if k micro-batches with the loss divided by k give the big batch's gradient to FP32 "
                 "rounding (relative error < 1e-5) both for equal-sized micro-batches and for padded sequences; "
                 "partly if only equal-sized ones do (padded ones need the step's token count); fails if equal-sized "
                 "ones do not")
C25_CRITERION = ("holds if forgetting / k multiplies the update by k (within 1%) with SGD and, at ordinary gradient "
                 "scales, with Adam; partly if only SGD's; fails if SGD's update is not k times larger")
TOL = 1e-5


@judge("C24", criterion=C24_CRITERION, examples=[
    {"fixed_error": 2e-7, "padded_mean_error": 3e-7, "padded_token_error": 1e-7},
    {"fixed_error": 2e-7, "padded_mean_error": 9e-2, "padded_token_error": 1e-7},
    {"fixed_error": 1e-2, "padded_mean_error": 9e-2, "padded_token_error": 1e-2}])
def c24(fixed_error: float, padded_mean_error: float, padded_token_error: float) -> Judged:
    """C24 from relative gradient errors against the big batch: equal-sized micro-batches / k, padded sequences
    with each micro-batch's mean / k, and padded sequences normalised by the step's token count."""
    for name, v in (("fixed_error", fixed_error), ("padded_mean_error", padded_mean_error),
                    ("padded_token_error", padded_token_error)):
        check_number(name, v, minimum=0)
    detail = (f"equal-sized {fixed_error:.1e}; padded: mean per micro-batch / k {padded_mean_error:.1e}, "
              f"sum / step's tokens {padded_token_error:.1e}")
    if fixed_error >= TOL:
        return verdict("fails", C24_CRITERION, detail)
    if padded_mean_error < TOL:
        return verdict("holds", C24_CRITERION, detail)
    return verdict("partly", C24_CRITERION, detail + ": with padding divide by the step's token count, not by k")


@judge("C25", criterion=C25_CRITERION, examples=[{"sgd_ratio": 4.0, "adam_ratio": 4.0, "k": 4},
                                                 {"sgd_ratio": 4.0, "adam_ratio": 1.0, "k": 4},
                                                 {"sgd_ratio": 1.0, "adam_ratio": 1.0, "k": 4}])
def c25(sgd_ratio: float, adam_ratio: float, k: int) -> Judged:
    """C25 from how much farther the parameters move without / k than with it (SGD; Adam at ordinary scales)."""
    check_number("sgd_ratio", sgd_ratio, minimum=0)
    check_number("adam_ratio", adam_ratio, minimum=0)
    check_int("k", k, minimum=2)
    detail = f"x{sgd_ratio:.2f} with SGD, x{adam_ratio:.2f} with Adam (k = {k})"
    if abs(sgd_ratio / k - 1) > 0.01:
        return verdict("fails", C25_CRITERION, detail)
    if abs(adam_ratio / k - 1) <= 0.01:
        return verdict("holds", C25_CRITERION, detail)
    return verdict("partly", C25_CRITERION, detail + ": for Adam it divides eps by k, visible only where gradients "
                   "approach eps")
