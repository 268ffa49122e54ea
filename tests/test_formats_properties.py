"""Property-based tests of the chapter 02 codecs (`utils.lessons.formats`), checked with exact fractions.

Deterministic: hypothesis runs derandomised (a fixed seed derived from each test) with a bounded number of
examples and no database, so the suite gives the same verdict on every run and adds a few seconds.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from utils.lessons.formats import FORMATS, decode, describe, encode, fields, spacing

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=200,
                    suppress_health_check=[HealthCheck.too_slow])
NEAREST = sorted(f for f in FORMATS if f != "e8m0")  # round to nearest, ties to even (e8m0 has its own rule)
SMALL = [f for f in FORMATS if FORMATS[f].bits <= 16]


def sign_bit(fmt: str) -> int:
    return 1 << (FORMATS[fmt].bits - 1) if FORMATS[fmt].has_sign else 0


@cache
def positive_table(fmt: str) -> tuple[list[Fraction], list[int]]:
    """Every finite non-negative value of a format as an exact fraction, sorted, with its code."""
    f = FORMATS[fmt]
    limit = 1 << (f.bits - 1) if f.has_sign else 1 << f.bits
    pairs = sorted((Fraction(decode(c, fmt)), c) for c in range(limit) if math.isfinite(decode(c, fmt)))
    return [v for v, _ in pairs], [c for _, c in pairs]


def negative(x: int | float) -> bool:
    """The sign encode must keep: -0.0 and negative values that round to zero keep theirs."""
    return math.copysign(1.0, x) < 0 if isinstance(x, float) else x < 0


def reference_code(x: Fraction, fmt: str, neg: bool | None = None) -> int:
    """The correctly rounded code of the exact value x: nearest value, ties to the even code, and past the
    largest finite value the format's rule (overflow to infinity, or saturate), from exact fractions."""
    f = FORMATS[fmt]
    sign = sign_bit(fmt) if (x < 0 if neg is None else neg) else 0
    a = abs(x)
    values, codes = positive_table(fmt)
    top, below_top = values[-1], values[-2]
    top_mid = top + (top - below_top) / 2  # half an ulp above the largest finite value
    if a > top_mid or (a == top_mid and codes[-1] & 1):
        return sign | (codes[-1] if f.overflow == "saturate" else ((1 << f.exp_bits) - 1) << f.man_bits)
    i = bisect.bisect_left(values, a)
    if i < len(values) and values[i] == a:
        return sign | codes[i]
    if i == len(values):
        return sign | codes[-1]
    lo, hi = values[i - 1], values[i]
    if a - lo < hi - a:
        return sign | codes[i - 1]
    if a - lo > hi - a:
        return sign | codes[i]
    return sign | (codes[i - 1] if codes[i - 1] % 2 == 0 else codes[i])


def fp32_reference_code(x: Fraction, neg: bool | None = None) -> int:
    """Correct rounding to FP32 from exact fractions, without a table: the binade, the quantum, round half even."""
    sign = 1 << 31 if (x < 0 if neg is None else neg) else 0
    a = abs(x)
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    exponent = max(e, -126)
    quantum = Fraction(2) ** (exponent - 23)
    q, r = divmod(a, quantum)
    n = int(q)
    if r > quantum / 2 or (r == quantum / 2 and n & 1):
        n += 1
    if n >= 1 << 24:
        n >>= 1
        exponent += 1
    if exponent > 127:
        return sign | 0x7F800000
    if n < 1 << 23:
        return sign | n
    return sign | ((exponent + 127) << 23) | (n - (1 << 23))


def finite_value(code: int, fmt: str) -> bool:
    return math.isfinite(decode(code, fmt))


# --- round trip -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", SMALL)
def test_round_trip_every_code_of_the_small_formats(fmt):
    for code in range(1 << FORMATS[fmt].bits):
        value = decode(code, fmt)
        if math.isnan(value):
            assert math.isnan(decode(encode(value, fmt), fmt)) if fmt != "fp4_e2m1" else True
        else:
            assert encode(value, fmt) == code, (fmt, hex(code))


@PROPERTY
@given(st.integers(0, 2**32 - 1))
def test_round_trip_fp32_codes(code):
    value = decode(code, "fp32")
    if math.isnan(value):
        assert math.isnan(decode(encode(value, "fp32"), "fp32"))
    else:
        assert encode(value, "fp32") == code
        s, e, m = fields(code, "fp32")
        assert (s << 31) | (e << 23) | m == code


# --- monotone -------------------------------------------------------------------------------------------------

FLOATS = st.floats(allow_nan=False, allow_infinity=True, width=64)
INTS = st.integers(-(2**1100), 2**1100)


@PROPERTY
@given(st.sampled_from(sorted(FORMATS)), st.one_of(FLOATS, INTS), st.one_of(FLOATS, INTS))
def test_encode_is_monotone(fmt, a, b):
    if fmt in ("e8m0",):  # no sign: monotone in the magnitude
        a, b = abs(a), abs(b)
    lo, hi = (a, b) if a <= b else (b, a)
    v_lo, v_hi = decode(encode(lo, fmt), fmt), decode(encode(hi, fmt), fmt)
    if math.isnan(v_lo) or math.isnan(v_hi):  # e8m0 rounds past 2**127 to NaN, as torch does
        assert fmt == "e8m0"
        return
    assert v_lo <= v_hi, (fmt, lo, hi, v_lo, v_hi)


# --- correct rounding, checked with exact fractions ------------------------------------------------------------

@PROPERTY
@given(st.sampled_from(NEAREST), st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_floats_round_correctly(fmt, x):
    want = (fp32_reference_code(Fraction(x), negative(x)) if fmt == "fp32"
            else reference_code(Fraction(x), fmt, negative(x)))
    assert encode(x, fmt) == want, (fmt, x)


@PROPERTY
@given(st.sampled_from([f for f in NEAREST if f != "fp32"]), st.data())
def test_values_near_midpoints_round_correctly(fmt, data):
    """The hard cases: exact midpoints between neighbours and the floats on either side of them."""
    values, _ = positive_table(fmt)
    i = data.draw(st.integers(0, len(values) - 2))
    mid = (values[i] + values[i + 1]) / 2
    x = float(mid) * data.draw(st.sampled_from([1.0, -1.0]))
    for y in (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf)):
        assert encode(y, fmt) == reference_code(Fraction(y), fmt, negative(y)), (fmt, y)


@PROPERTY
@given(st.sampled_from(NEAREST), st.one_of(st.integers(-(2**2000), 2**2000),
                                           st.builds(lambda k, d: 2**k + d, st.integers(0, 1030),
                                                     st.integers(-(2**40), 2**40))))
def test_integers_of_any_size_round_once(fmt, x):
    want = fp32_reference_code(Fraction(x)) if fmt == "fp32" else reference_code(Fraction(x), fmt)
    assert encode(x, fmt) == want, (fmt, x)


def test_the_double_rounding_example_of_issue_18():
    x = 2**60 + 2**36 + 1  # through float64 it becomes 2**60 + 2**36, a tie that then rounds to even
    assert encode(x, "fp32") == 0x5D800001
    assert encode(float(x), "fp32") == 0x5D800000  # the float64 is a different number


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_integers_beyond_float_range_follow_the_overflow_rule(fmt):
    f = FORMATS[fmt]
    huge = 10**400
    code = encode(huge, fmt)
    if fmt == "e8m0":
        assert code == 0xFF
    elif f.overflow == "saturate":
        assert code == f.max_code and encode(-huge, fmt) == sign_bit(fmt) | f.max_code
    else:
        assert decode(code, fmt) == math.inf and decode(encode(-huge, fmt), fmt) == -math.inf
    describe(huge, fmt)  # no OverflowError anywhere
    spacing(huge, fmt)


@PROPERTY
@given(st.one_of(st.floats(min_value=0, allow_nan=False, allow_infinity=False), st.integers(0, 2**300)))
def test_e8m0_follows_its_rule(x):
    """E8M0 (torch.float8_e8m0fnu): the power of two below |x|, one up when the mantissa is >= 1.5."""
    code = encode(x, "e8m0")
    a = Fraction(x)
    if a < Fraction(2) ** -126:
        assert code == (1 if a > Fraction(2) ** -127 else 0)
        return
    e = 0
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    want = e + 127 + (1 if a >= Fraction(3, 2) * Fraction(2) ** e else 0)
    assert code == min(want, 0xFF)


# --- bad input is refused by name -------------------------------------------------------------------------------

@PROPERTY
@given(st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2),
                 st.complex_numbers(allow_nan=False)))
def test_bad_x_is_refused_by_name(x):
    with pytest.raises(TypeError, match="x must"):
        encode(x, "fp16")


@PROPERTY
@given(st.one_of(st.none(), st.integers(), st.text(max_size=8).filter(lambda s: s not in FORMATS),
                 st.lists(st.text(max_size=2), max_size=2)))
def test_bad_fmt_is_refused_by_name(fmt):
    for fn, arg in ((encode, 1.0), (decode, 0), (fields, 0), (spacing, 1.0), (describe, 1.0)):
        with pytest.raises((TypeError, ValueError), match="fmt"):
            fn(arg, fmt)


@PROPERTY
@given(st.sampled_from(sorted(FORMATS)), st.one_of(st.integers(-(2**70), -1), st.integers(2**32, 2**70),
                                                   st.none(), st.floats(), st.booleans()))
def test_bad_code_is_refused_by_name(fmt, code):
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < 1 << FORMATS[fmt].bits:
        return
    for fn in (decode, fields):
        with pytest.raises((TypeError, ValueError), match="code"):
            fn(code, fmt)


def test_nan_is_refused_by_fp4_by_name():
    with pytest.raises(ValueError, match="x is NaN"):
        encode(math.nan, "fp4_e2m1")
