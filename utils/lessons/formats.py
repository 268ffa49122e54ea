"""Bit-exact codecs for the course's number formats (chapter 02).

`encode(x, fmt)` rounds the exact value of the Python float `x` once, to nearest with ties to even,
and handles overflow and NaN as torch's cast to that dtype does; `decode(code, fmt)` gives the exact
value of a bit pattern; `fields(code, fmt)` splits it into (sign, exponent bits, mantissa bits).

Formats: "fp32", "fp16", "bf16", "tf32" (a matmul compute mode, not a storage dtype: FP32's 8 exponent
bits with 10 mantissa bits; the codec rounds to nearest even), "fp8_e4m3" (torch.float8_e4m3fn: no
infinities, NaN only at S.1111.111, max 448; the codec saturates anything larger, infinities included, to
+-448, as torch's eager cast does since torch 2.12 and as torchao's clamped casts do on every version; older
eager casts gave NaN beyond 464), "fp8_e5m2" (IEEE-like, max 57344, overflow to infinity), and for the
block-scaled formats "e8m0" (the MX block-scale format: 8 exponent bits, no sign, no mantissa, 0xFF is NaN;
rounding as torch.float8_e8m0fnu) and "fp4_e2m1" (NVFP4/MXFP4 elements: values 0, 0.5, 1, 1.5, 2, 3, 4, 6;
no infinity or NaN, so we saturate and refuse NaN).

`x` may be a Python int of any size: it is rounded once from its exact value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Format:
    name: str
    exp_bits: int
    man_bits: int
    bias: int
    has_sign: bool = True
    ieee_specials: bool = True  # all-ones exponent is inf (mantissa 0) or NaN
    overflow: str = "inf"  # "inf", "saturate" (to the largest finite value)
    torch_dtype: str | None = None

    @property
    def bits(self) -> int:
        return int(self.has_sign) + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """Code of the largest finite positive value."""
        if self.name == "fp8_e4m3":
            return (((1 << self.exp_bits) - 1) << self.man_bits) | ((1 << self.man_bits) - 2)  # S.1111.110
        if self.ieee_specials:
            return (((1 << self.exp_bits) - 2) << self.man_bits) | ((1 << self.man_bits) - 1)
        if self.name == "e8m0":
            return 0xFE
        return (1 << (self.exp_bits + self.man_bits)) - 1


FORMATS: dict[str, Format] = {
    "fp32": Format("fp32", 8, 23, 127, torch_dtype="float32"),
    "fp16": Format("fp16", 5, 10, 15, torch_dtype="float16"),
    "bf16": Format("bf16", 8, 7, 127, torch_dtype="bfloat16"),
    "tf32": Format("tf32", 8, 10, 127),
    "fp8_e4m3": Format("fp8_e4m3", 4, 3, 7, ieee_specials=False, overflow="saturate", torch_dtype="float8_e4m3fn"),
    "fp8_e5m2": Format("fp8_e5m2", 5, 2, 15, torch_dtype="float8_e5m2"),
    "e8m0": Format("e8m0", 8, 0, 127, has_sign=False, ieee_specials=False, overflow="saturate",
                   torch_dtype="float8_e8m0fnu"),
    "fp4_e2m1": Format("fp4_e2m1", 2, 1, 1, ieee_specials=False, overflow="saturate"),
}


def get_format(fmt: str) -> Format:
    """The Format named `fmt`; ValueError lists the names allowed."""
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format name (str), got {type(fmt).__name__}")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got {fmt!r}")
    return FORMATS[fmt]


def _check_code(code: int, f: Format) -> None:
    if not isinstance(code, int) or isinstance(code, bool):
        raise TypeError(f"code must be an int bit pattern, got {type(code).__name__}")
    if not 0 <= code < (1 << f.bits):
        raise ValueError(f"code must be in [0, 2**{f.bits}) for {f.name}, got {code}")


def fields(code: int, fmt: str) -> tuple[int, int, int]:
    """(sign, exponent bits, mantissa bits) of a bit pattern, each as an unsigned int."""
    f = get_format(fmt)
    _check_code(code, f)
    sign = (code >> (f.exp_bits + f.man_bits)) & 1 if f.has_sign else 0
    return sign, (code >> f.man_bits) & ((1 << f.exp_bits) - 1), code & ((1 << f.man_bits) - 1)


def decode(code: int, fmt: str) -> float:
    """The exact value of a bit pattern (NaN for NaN codes, +-inf where the format has infinities)."""
    f = get_format(fmt)
    sign, exp, man = fields(code, fmt)
    all_ones = exp == (1 << f.exp_bits) - 1
    if f.name == "e8m0":
        return math.nan if all_ones else math.ldexp(1.0, exp - f.bias)
    if f.ieee_specials and all_ones:
        return (-math.inf if sign else math.inf) if man == 0 else math.nan
    if f.name == "fp8_e4m3" and all_ones and man == (1 << f.man_bits) - 1:
        return math.nan
    if exp == 0:
        value = math.ldexp(man, f.emin - f.man_bits)
    else:
        value = math.ldexp((1 << f.man_bits) | man, exp - f.bias - f.man_bits)
    return -value if sign else value


def _nan_code(f: Format, negative: bool) -> int:
    sign = (1 << (f.bits - 1)) if negative and f.has_sign else 0
    if f.name == "e8m0":
        return 0xFF
    if f.name in ("fp8_e4m3", "fp8_e5m2"):  # torch's float8 casts give all-ones NaNs
        return sign | 0x7F
    return sign | (((1 << f.exp_bits) - 1) << f.man_bits) | (1 << (f.man_bits - 1))  # quiet NaN


def _exact_parts(x: int | float) -> tuple[int, int]:
    """|x| = mant * 2**k exactly, with integers mant >= 0 and k (x finite)."""
    if isinstance(x, int):
        return abs(x), 0
    m, e = math.frexp(abs(x))  # |x| = m * 2**e exactly, m in [0.5, 1)
    return int(m * (1 << 53)), e - 53  # exact: a double has 53 significant bits


def _encode_e8m0(mant: int, k: int) -> int:
    """torch.float8_e8m0fnu's rule on the exact value mant * 2**k: the sign is ignored, and the power of two
    rounds up when the mantissa is at least 1.5 (past 2**127: NaN); float32's subnormal range gives
    2**-127 (code 0) or 2**-126 (code 1)."""
    if mant == 0:
        return 0
    e = mant.bit_length() - 1 + k  # 2**e <= value < 2**(e + 1)
    if e < -126:  # below float32's smallest normal
        return 1 if Fraction(mant) * Fraction(2) ** k > Fraction(2) ** -127 else 0
    # mantissa >= 1.5  <=>  value >= 3 * 2**(e - 1)  <=>  2 * mant >= 3 * 2**(e - k)
    top = mant.bit_length() - 1  # e - k
    round_up = 2 * mant >= 3 << top
    return min(e + 127 + int(round_up), 0xFF)  # rounding up past 2**127 gives NaN (0xFF), as torch does


def encode(x: int | float, fmt: str) -> int:
    """The bit pattern of `x` rounded once to nearest, ties to even (overflow and NaN as torch's cast).

    `x` is a Python float or a Python int of any size; an int is rounded from its exact value (never through
    a float, which would round twice beyond 2**53), and one beyond the format's range overflows by the
    format's rule (infinity, or saturation for E4M3, E8M0 and FP4).
    """
    f = get_format(fmt)
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"x must be a Python float or int, got {type(x).__name__}")
    if isinstance(x, float) and math.isnan(x):
        if f.name == "fp4_e2m1":
            raise ValueError("x is NaN, which fp4_e2m1 cannot represent (it has no NaN)")
        if f.name == "e8m0":
            return 0xFF
        return _nan_code(f, math.copysign(1.0, x) < 0)
    if isinstance(x, float) and math.isinf(x):
        if f.name == "e8m0":
            return 0xFF
        sign = (1 << (f.bits - 1)) if x < 0 else 0
        return sign | (f.max_code if f.overflow == "saturate" else ((1 << f.exp_bits) - 1) << f.man_bits)
    mant, k = _exact_parts(x)
    if f.name == "e8m0":
        return _encode_e8m0(mant, k)
    negative = x < 0 or (isinstance(x, float) and math.copysign(1.0, x) < 0)
    sign = (1 << (f.bits - 1)) if negative else 0
    if mant == 0:
        return sign
    e = mant.bit_length() - 1 + k  # 2**e <= |x| < 2**(e + 1)
    exponent = max(e, f.emin)  # binade of |x|, or the subnormal range's
    shift = (exponent - f.man_bits) - k  # bits to drop so the quantum is 2**(exponent - man_bits)
    if shift <= 0:
        n = mant << -shift
    else:
        n, rest = mant >> shift, mant & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and n & 1):
            n += 1
    # value = n * 2**(exponent - man_bits); renormalise if rounding carried into the next binade
    if n >= 1 << (f.man_bits + 1):
        n >>= 1
        exponent += 1
    if n < 1 << f.man_bits:  # subnormal (or zero after rounding down)
        code = n
    elif exponent + f.bias >= 1 << f.exp_bits:  # beyond every exponent field: overflow
        code = f.max_code + 1
    else:
        code = ((exponent + f.bias) << f.man_bits) | (n - (1 << f.man_bits))
    if code > f.max_code:
        if f.overflow == "saturate":
            code = f.max_code
        else:
            code = ((1 << f.exp_bits) - 1) << f.man_bits  # infinity
    return sign | code


def format_properties(fmt: str) -> dict[str, float]:
    """Largest finite, smallest normal, smallest subnormal, machine epsilon and decimal digits,
    computed from the decoder (not typed in)."""
    f = get_format(fmt)
    largest = decode(f.max_code, fmt)
    smallest_normal = decode(1 << f.man_bits, fmt) if f.exp_bits and f.name != "e8m0" else decode(0, fmt)
    smallest_sub = decode(1, fmt) if f.man_bits else smallest_normal
    one = encode(1.0, fmt)
    eps = decode(one + 1, fmt) - 1.0 if f.man_bits else 1.0  # e8m0: the next value after 1 is 2
    return {"largest": largest, "smallest_normal": smallest_normal, "smallest_subnormal": smallest_sub,
            "epsilon": eps, "decimal_digits": math.log10(2) * (f.man_bits + 1)}


@dataclass(frozen=True)
class Stored:
    """What happens to a number stored in a format: its bits, the value kept, the error, and the outcome."""

    fmt: str
    x: float
    code: int
    bits: str  # e.g. "0 01111 0000000000": sign, exponent and mantissa fields separated by spaces
    value: float
    abs_error: float
    rel_error: float
    outcome: str  # "exact", "rounded", "underflow to zero", "subnormal", "overflow to inf", "saturated", "NaN"


def _to_float(v: int | float | Fraction) -> float:
    """float(v), or +-inf where v is beyond float range (a huge int or fraction)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def spacing(x: float, fmt: str) -> float:
    """The gap between |x| (rounded into the format) and the next larger representable value (one ULP).

    NaN for a NaN or infinite `x`, as numpy.spacing: no representable neighbour is next to them."""
    f = get_format(fmt)
    if isinstance(x, float) and not math.isfinite(x):
        return math.nan
    code = encode(abs(x) if isinstance(x, int | float) and not isinstance(x, bool) else x, fmt)
    if code >= f.max_code:
        return decode(f.max_code, fmt) - decode(f.max_code - 1, fmt)
    return decode(code + 1, fmt) - decode(code, fmt)


def describe(x: float, fmt: str) -> Stored:
    """Store `x` in `fmt` and report the bits, the stored value, the rounding error and what happened."""
    f = get_format(fmt)
    code = encode(x, fmt)
    sign, exp, man = fields(code, fmt)
    parts = ([str(sign)] if f.has_sign else []) + [format(exp, f"0{f.exp_bits}b")]
    parts += [format(man, f"0{f.man_bits}b")] if f.man_bits else []
    value = decode(code, fmt)
    exact = x  # compared exactly below (Python compares an int with a float exactly)
    x = _to_float(x)
    if math.isnan(value):
        outcome = "NaN"
    elif math.isinf(value):
        outcome = "exact" if math.isinf(x) and isinstance(exact, float) else "overflow to inf"
    elif f.overflow == "saturate" and (math.isinf(x) or abs(exact) > decode(f.max_code, fmt)):
        outcome = "saturated"
    elif value == 0 and exact != 0:
        outcome = "underflow to zero"
    elif value == exact:
        outcome = "exact"
    elif exp == 0 and f.name != "e8m0":
        outcome = "subnormal"
    else:
        outcome = "rounded"
    finite = math.isfinite(value) and not (isinstance(exact, float) and not math.isfinite(exact))
    abs_error = _to_float(abs(Fraction(value) - exact)) if finite else math.nan
    rel_error = _to_float(abs(Fraction(value) - exact) / abs(exact)) if finite and exact != 0 else (
        0.0 if finite else math.nan)
    return Stored(fmt, x, code, " ".join(parts), value, abs_error, rel_error, outcome)
