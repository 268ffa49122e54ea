"""Bit-exact codecs for the course's number formats (chapter 02).

`encode(x, fmt)` rounds the exact value of the Python float `x` once, to nearest with ties to even,
and handles overflow and NaN as torch's cast to that dtype does; `decode(code, fmt)` gives the exact
value of a bit pattern; `fields(code, fmt)` splits it into (sign, exponent bits, mantissa bits).

Formats: "fp32", "fp16", "bf16", "fp8_e4m3" (torch.float8_e4m3fn: no infinities, NaN only at S.1111.111,
max 448; torch saturates anything larger, infinities included, to +-448), "fp8_e5m2" (IEEE-like, max
57344, overflow to infinity), and for the MX preview "e8m0" (the MX block-scale format: 8 exponent bits,
no sign, no mantissa, 0xFF is NaN; rounding as torch.float8_e8m0fnu) and "fp4_e2m1" (NVFP4/MXFP4
elements: values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no infinity or NaN, so we saturate and refuse NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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


def _encode_e8m0(x: float) -> int:
    """torch.float8_e8m0fnu's rule on the exact value: the sign is ignored, NaN and inf give 0xFF,
    and the power of two rounds up when the mantissa is at least 1.5 (past 2**127: NaN)."""
    a = abs(x)
    if math.isnan(a) or math.isinf(a) or a >= 2.0**128:
        return 0xFF
    if a < 2.0**-126:  # float32's subnormal range: only 2**-127 (code 0) or 2**-126 (code 1)
        return 1 if a > 2.0**-127 else 0
    m, e = math.frexp(a)  # a = m * 2**e, m in [0.5, 1)
    code = e - 1 + 127 + (1 if m >= 0.75 else 0)
    return min(code, 0xFF)  # rounding up past 2**127 gives NaN, as torch does


def encode(x: float, fmt: str) -> int:
    """The bit pattern of `x` rounded once to nearest, ties to even (overflow and NaN as torch's cast)."""
    f = get_format(fmt)
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"x must be a Python float or int, got {type(x).__name__}")
    x = float(x)
    if f.name == "e8m0":
        return _encode_e8m0(x)
    negative = math.copysign(1.0, x) < 0
    sign = (1 << (f.bits - 1)) if negative else 0
    if math.isnan(x):
        if f.name == "fp4_e2m1":
            raise ValueError("x is NaN, which fp4_e2m1 cannot represent (it has no NaN)")
        return _nan_code(f, negative)
    a = abs(x)
    if math.isinf(a):
        return sign | (f.max_code if f.overflow == "saturate" else ((1 << f.exp_bits) - 1) << f.man_bits)
    if a == 0.0:
        return sign
    m, e = math.frexp(a)  # a = m * 2**e exactly, m in [0.5, 1)
    mant = int(m * (1 << 53))  # a = mant * 2**(e - 53), exact: a double has 53 significant bits
    exponent = max(e - 1, f.emin)  # binade of a, or the subnormal range's
    shift = (exponent - f.man_bits) - (e - 53)  # bits to drop so the quantum is 2**(exponent - man_bits)
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


def spacing(x: float, fmt: str) -> float:
    """The gap between |x| (rounded into the format) and the next larger representable value (one ULP)."""
    f = get_format(fmt)
    code = encode(abs(float(x)), fmt)
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
    x = float(x)
    if math.isnan(value):
        outcome = "NaN"
    elif math.isinf(value):
        outcome = "exact" if math.isinf(x) else "overflow to inf"
    elif f.overflow == "saturate" and (math.isinf(x) or abs(x) > decode(f.max_code, fmt)):
        outcome = "saturated"
    elif value == 0 and x != 0:
        outcome = "underflow to zero"
    elif value == x:
        outcome = "exact"
    elif exp == 0 and f.name != "e8m0":
        outcome = "subnormal"
    else:
        outcome = "rounded"
    finite = math.isfinite(value) and math.isfinite(x)
    abs_error = abs(value - x) if finite else math.nan
    rel_error = abs_error / abs(x) if finite and x != 0 else (0.0 if finite else math.nan)
    return Stored(fmt, x, code, " ".join(parts), value, abs_error, rel_error, outcome)
