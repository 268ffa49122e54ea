"""Verdicts of chapter 02 (number formats): claims C11, C12 and C13, judged on the codec's computed properties.

Each claim quotes figures rounded to a few digits ("about 6.1e-5"); a figure agrees when the computed value rounds
to it at the digits the claim states (`agrees_to_stated_digits`), so the criterion is the claim's own precision.
"""

from __future__ import annotations

from decimal import Decimal

from utils.course.verdicts import Judged, judge, verdict


def agrees_to_stated_digits(measured: float, stated: str) -> bool:
    """True when `measured` lies within half a unit of the last digit of `stated` (a number as text, "6.1e-5")."""
    if not isinstance(stated, str):
        raise TypeError(f"stated must be a number written as text, got {type(stated).__name__}")
    if not isinstance(measured, int | float) or isinstance(measured, bool):
        raise TypeError(f"measured must be a number, got {type(measured).__name__}")
    d = Decimal(stated)
    half_unit = Decimal(1).scaleb(d.as_tuple().exponent) / 2
    return abs(Decimal(measured) - d) <= half_unit


C11_CRITERION = ("holds when FP16's smallest normal, largest and smallest subnormal values, computed by the codec, "
                 "agree with 6.1e-5, 65504 and 6e-8 to the digits the claim states; fails otherwise")


@judge("C11", criterion=C11_CRITERION, examples=[
    {"smallest_normal": 2.0**-14, "largest": 65504.0, "smallest_subnormal": 2.0**-24},
    {"smallest_normal": 2.0**-14, "largest": 65504.0, "smallest_subnormal": 2.0**-25}])
def c11(smallest_normal: float, largest: float, smallest_subnormal: float) -> Judged:
    """C11: FP16 covers about 6.1e-5 to 65504 (normal range); its smallest positive value is about 6e-8."""
    checks = {"smallest normal ~ 6.1e-5": agrees_to_stated_digits(smallest_normal, "6.1e-5"),
              "largest = 65504": agrees_to_stated_digits(largest, "65504"),
              "smallest subnormal ~ 6e-8": agrees_to_stated_digits(smallest_subnormal, "6e-8")}
    wrong = [k for k, ok in checks.items() if not ok]
    return verdict("fails" if wrong else "holds", C11_CRITERION,
                   f"disagreeing: {', '.join(wrong)}" if wrong else "all three agree")


C12_CRITERION = ("the range part holds when BF16's smallest normal equals FP32's and its largest agrees with 3.4e38 "
                 "to the stated digits; the precision part when its decimal digits, log10 2^(M+1), lie in [2, 3]; "
                 "holds if both parts hold, partly if one, fails if none")


@judge("C12", criterion=C12_CRITERION, examples=[
    {"bf16_smallest_normal": 2.0**-126, "fp32_smallest_normal": 2.0**-126, "bf16_largest": 3.3895e38,
     "bf16_digits": 2.41},
    {"bf16_smallest_normal": 2.0**-126, "fp32_smallest_normal": 2.0**-126, "bf16_largest": 3.3895e38,
     "bf16_digits": 3.31},
    {"bf16_smallest_normal": 2.0**-14, "fp32_smallest_normal": 2.0**-126, "bf16_largest": 65504.0,
     "bf16_digits": 3.31}])
def c12(bf16_smallest_normal: float, fp32_smallest_normal: float, bf16_largest: float, bf16_digits: float) -> Judged:
    """C12: BF16 has the same range as FP32 (about 1.2e-38 to 3.4e38) with about 2 to 3 decimal digits."""
    same_range = bf16_smallest_normal == fp32_smallest_normal and agrees_to_stated_digits(bf16_largest, "3.4e38")
    digits_ok = 2 <= bf16_digits <= 3
    name = "holds" if same_range and digits_ok else "partly" if same_range or digits_ok else "fails"
    return verdict(name, C12_CRITERION, f"range {'same' if same_range else 'different'}, "
                   f"{bf16_digits:.2f} digits {'inside' if digits_ok else 'outside'} [2, 3]")


C13_CRITERION = ("holds when the largest finite E4M3 (float8_e4m3fn) and E5M2 values computed by the codec are "
                 "448 and 57344; fails otherwise")


@judge("C13", criterion=C13_CRITERION, examples=[{"e4m3_largest": 448.0, "e5m2_largest": 57344.0},
                                                 {"e4m3_largest": 240.0, "e5m2_largest": 57344.0}])
def c13(e4m3_largest: float, e5m2_largest: float) -> Judged:
    """C13: FP8 E4M3 reaches about +-448, E5M2 about +-57344."""
    ok = agrees_to_stated_digits(e4m3_largest, "448") and agrees_to_stated_digits(e5m2_largest, "57344")
    return verdict("holds" if ok else "fails", C13_CRITERION,
                   f"E4M3 {e4m3_largest:g}, E5M2 {e5m2_largest:g}")
