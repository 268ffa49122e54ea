"""Checks for lab 02 (number formats).

Each exercise's cases live in an `expect_*` function that grading/hidden/ch02.py calls again with held-out cases.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable

import torch

from utils.course.checks.core import (
    TORCHAO_FP8,
    CheckFailed,
    Verdict,
    answer_each,
    answered,
    expect_reasoning,
    guarded,
    own_work,
    run_check,
)
from utils.lessons.formats import decode, encode

# The library implementations of exercise 2.1: the course's codec and struct's half-precision format
DECODE_LIBRARY = (decode, encode, struct.unpack, struct.unpack_from, struct.Struct.unpack, struct.Struct.unpack_from)
DECODE_MODULES = ("numpy",)  # numpy's float16 (a view or cast of the bits) decodes the format for the learner


def check_decode_fp16(decode_fp16: Callable[[int], float]) -> Verdict:
    """Exercise 2.1: every one of the 65536 FP16 bit patterns, against torch."""

    def body() -> None:
        # the learner's answers first, the truth after: nothing the check computed is on the stack while they run
        with own_work(*DECODE_LIBRARY, dtypes=(torch.float16,), modules=DECODE_MODULES):  # one watch, 65536 calls
            answers = answer_each(decode_fp16, [(code,) for code in range(2**16)])
        codes = torch.arange(2**16, dtype=torch.int32)
        values = torch.where(codes >= 2**15, codes - 2**16, codes).to(torch.int16).view(torch.float16).double()
        for code, expected, got in zip(range(2**16), values.tolist(), answers, strict=True):
            ok = (math.isnan(got) and math.isnan(expected)) if math.isnan(expected) else got == expected
            if not ok:
                raise CheckFailed(f"decode_fp16({code:#06x}) = {expected!r}", repr(got),
                                  "exponent field 0 means subnormal (no implicit 1, exponent 1 - 15); "
                                  "all ones means inf (mantissa 0) or NaN.")

    return run_check("2.1", body)


def reference_round(x: float, exp_bits: int, man_bits: int) -> float:
    """x rounded to nearest, ties to even, in an IEEE-style format (sign, exp_bits, man_bits; the top exponent
    field reserved for inf/NaN, field 0 subnormal), saturating: anything beyond the largest finite value, infinity
    included, becomes that value (with x's sign). Signed zeros kept."""
    sign = math.copysign(1.0, x)
    a = abs(x)
    bias = 2 ** (exp_bits - 1) - 1
    fmax = (2 - 2.0**-man_bits) * 2.0 ** (2**exp_bits - 2 - bias)
    if a == 0:
        return sign * 0.0
    if math.isinf(a):
        return sign * fmax
    quantum = 2.0 ** (max(math.frexp(a)[1] - 1, 1 - bias) - man_bits)  # the spacing in x's binade
    return sign * min(round(a / quantum) * quantum, fmax)  # round() on an exact float is ties-to-even


# the formats the rounding exercise names: E5M2, TF32 (E8M10), FP16, BF16, IEEE-style E4M3 and FP6 E3M2
ROUND_FORMATS = {"e5m2": (5, 2), "tf32": (8, 10), "fp16": (5, 10), "bf16": (8, 7), "e4m3_ieee": (4, 3),
                 "e3m2_ieee": (3, 2)}
_TORCH_DTYPES = (torch.float16, torch.bfloat16, torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e4m3fnuz,
                 torch.float8_e5m2fnuz)


def round_cases(seed: int, n: int, exp_bits: int, man_bits: int) -> list[float]:
    """float32 values around a format's range: its ties (normal and subnormal), its largest value and the first
    value that would round past it, infinities, signed zeros, and n random values over FP32's exponents."""
    bias = 2 ** (exp_bits - 1) - 1
    emax = 2**exp_bits - 2 - bias
    fmax = (2 - 2.0**-man_bits) * 2.0**emax
    tiny = 2.0 ** (1 - bias - man_bits)  # the smallest subnormal
    xs = [0.0, -0.0, math.inf, -math.inf, fmax, -fmax, fmax + 2.0 ** (emax - man_bits - 1), 1e38, tiny / 2,
          -tiny / 2, 3 * tiny / 2, 5 * tiny / 2, 1 + 2.0 ** (-man_bits - 1), 1 + 3 * 2.0 ** (-man_bits - 1),
          -(1 + 2.0 ** (-man_bits - 1)), tiny / 2 * (1 + 2**-20)]
    rng = random.Random(seed)
    xs += [rng.uniform(-2, 2) * 2.0 ** rng.randint(-150, 127) for _ in range(n)]
    xs += [rng.uniform(-2, 2) * 2.0 ** rng.randint(1 - bias - man_bits - 3, emax + 2) for _ in range(n)]
    return torch.tensor(xs, dtype=torch.float32).tolist()


def reference_round_tensor(x: torch.Tensor, exp_bits: int, man_bits: int) -> torch.Tensor:
    """reference_round over a float32 tensor, element by element: what exercise 2.2's tensor answer must equal."""
    return torch.tensor([reference_round(v, exp_bits, man_bits) for v in x.tolist()], dtype=torch.float32)


# What a loop over a tensor's elements in Python needs: the elements as Python numbers or a numpy array (item,
# tolist, numpy, float(), iteration), and the scalar tools chapter 02's `encode_once` rounds with (exact fractions,
# math, struct). Exercise 2.2 asks for the rounding on the whole tensor at once, as torchao's quantizers do it.
_TENSOR = torch._C.TensorBase
ELEMENTWISE = (_TENSOR.item, _TENSOR.tolist, _TENSOR.numpy, _TENSOR.__float__, _TENSOR.__int__, _TENSOR.unbind,
               torch.Tensor.__iter__, float.as_integer_ratio, struct.unpack, struct.pack)
ELEMENTWISE_MODULES = ("math", "fractions", "numpy")


def expect_round(round_to_format: Callable[[torch.Tensor, int, int], torch.Tensor],
                 cases: list[tuple[list[float], int, int]]) -> None:
    """cases: (float32 values, exp_bits, man_bits). One call per format on the whole tensor of values, with no
    element read out as a Python number; every value against reference_round, signs of zeros included."""
    for xs, exp_bits, man_bits in cases:
        x = torch.tensor(xs, dtype=torch.float32)
        with own_work(reference_round, reference_round_tensor, decode, encode, *ELEMENTWISE, dtypes=_TORCH_DTYPES,
                      modules=ELEMENTWISE_MODULES, what="the rounding, on the whole tensor"):
            got = round_to_format(x.clone(), exp_bits, man_bits)
        call = f"round_to_format(x, exp_bits={exp_bits}, man_bits={man_bits})"
        if not isinstance(got, torch.Tensor) or type(got) is not torch.Tensor or got.dtype != torch.float32 \
                or got.shape != x.shape:
            what = f"a {got.dtype} tensor of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else repr(got)
            raise CheckFailed(f"{call}: a float32 tensor of shape {tuple(x.shape)}", what[:200],
                              "return the rounded values as float32, one per element of x.")
        want = reference_round_tensor(x, exp_bits, man_bits)
        wrong = ((got != want) | (torch.signbit(got) != torch.signbit(want))).nonzero().flatten().tolist()
        if wrong:
            i = wrong[0]
            raise CheckFailed(f"{call}[{i}] = {want[i].item()!r} for x[{i}] = {xs[i]!r} ({len(wrong)} of {len(xs)} "
                              "values differ)", repr(got[i].item()),
                              "keep man_bits mantissa bits in x's binade, but never a finer spacing than the format's "
                              "subnormals (its exponent range is not FP32's); ties go to the even neighbour, and "
                              "beyond the largest finite value you saturate.")


def check_round_to_format(round_to_format: Callable[[torch.Tensor, int, int], torch.Tensor]) -> Verdict:
    """Exercise 2.2: round a whole float32 tensor to nearest even into E5M2 and TF32, saturating, with tensor
    operations (no element read out in Python)."""
    return run_check("2.2", lambda: expect_round(round_to_format, [(round_cases(0, 3000, 5, 2), 5, 2),
                                                                   (round_cases(1, 3000, 8, 10), 8, 10)]), points=2)


def expect_decode_fp16(decode_fp16: Callable[[int], float], codes: list[int]) -> None:
    """Each code against torch's view of the bits as float16, signs of zeros included."""
    with own_work(*DECODE_LIBRARY, dtypes=(torch.float16,), modules=DECODE_MODULES):
        answers = answer_each(decode_fp16, [(code,) for code in codes])  # the answers before the truth is computed
    t = torch.tensor([c - 2**16 if c >= 2**15 else c for c in codes], dtype=torch.int32).to(torch.int16)
    for code, expected, got in zip(codes, t.view(torch.float16).double().tolist(), answers, strict=True):
        ok = math.isnan(got) if math.isnan(expected) else (got == expected and
                                                          math.copysign(1.0, got) == math.copysign(1.0, expected))
        if not ok:
            raise CheckFailed(f"decode_fp16({code:#06x}) = {expected!r}", repr(got),
                              "the sign bit applies to every value, zeros and subnormals included.")


def check_smallest_kept_update(smallest_kept_update: Callable[[float, str], float]) -> Verdict:
    """Exercise 2.3: the smallest power of two that changes a weight when added in a format."""

    cases = [(w, f) for f in ("fp16", "bf16", "fp32") for w in (1.0, 0.75, 100.0, 1.0078125, 3.0, 1e-3)]
    return run_check("2.3", lambda: expect_smallest_kept_update(smallest_kept_update, cases))


def _reference_kept_update(weight: float, fmt: str) -> float:
    u = 2.0**-160
    while encode(decode(encode(weight, fmt), fmt) + u, fmt) == encode(weight, fmt):
        u *= 2
    return u


def expect_smallest_kept_update(smallest_kept_update: Callable[[float, str], float],
                                cases: list[tuple[float, str]]) -> None:
    """cases: (weight, fmt) pairs."""
    smallest_kept_update = guarded(smallest_kept_update, _reference_kept_update)
    for weight, fmt in cases:
        expected = _reference_kept_update(weight, fmt)
        got = smallest_kept_update(weight, fmt)
        if got != expected:
            raise CheckFailed(f"smallest_kept_update({weight}, {fmt!r}) = {expected!r}", repr(got),
                              "half a spacing is a tie: it rounds to the even neighbour, which may be the "
                              "weight itself.")


# 2.4 -------------------------------------------------------------------------------------------------------------
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MANTISSA_BITS = {"e4m3": 3, "e5m2": 2}
# Llama-3-8B's nn.Linear weights, {elements of one weight: how many such weights}: q_proj and o_proj 4096 x 4096,
# k_proj and v_proj 1024 x 4096 (grouped-query attention: 8 KV heads of 128), gate/up/down 14336 x 4096 (SwiGLU), in
# 32 layers, and the untied lm_head 128256 x 4096. Drawn N(0, 0.02^2) at init (transformers' initializer_range=0.02),
# each scaled per tensor so that its own amax lands on E4M3's 448. tests/test_ch02_ch03_labs.py builds the model
# from transformers' LlamaConfig on the meta device and counts the same shapes.
LLAMA8B_LINEAR_WEIGHTS = {4096 * 4096: 64, 1024 * 4096: 64, 14336 * 4096: 96, 128256 * 4096: 1}


def gaussian_amax_median(n: int) -> float:
    """The median of max |z| over n standard normal draws: the t with (1 - erfc(t / sqrt 2))^n = 1/2."""
    target = -math.expm1(-math.log(2) / n)  # P(|z| > t) = 1 - 2^(-1/n)
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erfc(mid / math.sqrt(2)) > target else (lo, mid)
    return (lo + hi) / 2


def reference_flushed_weights(n: int, fmt: str) -> float:
    """The expected number of n normal weights (any std) that per-tensor scaling to `fmt` turns into zero: amax is
    the median max |z| of n draws; a value becomes zero below half the format's smallest subnormal."""
    dtype = FP8[fmt]
    smallest_subnormal = torch.finfo(dtype).smallest_normal * 2.0 ** -FP8_MANTISSA_BITS[fmt]
    u = gaussian_amax_median(n) / torch.finfo(dtype).max * smallest_subnormal / 2  # in standard deviations
    return n * math.erf(u / math.sqrt(2))


def reference_flushed_model(weights: dict[int, int], fmt: str) -> float:
    """The expected number of weights flushed to zero over a model's tensors, each scaled per tensor:
    weights = {elements of one tensor: number of such tensors}."""
    return sum(count * reference_flushed_weights(n, fmt) for n, count in weights.items())


def log_uniform(n: int, spread: float, seed: int, *, zeros: int = 0, scale: float = 1.0) -> torch.Tensor:
    """n values whose magnitudes are spread uniformly over `spread` binades below `scale`, random signs, and
    `zeros` exact zeros."""
    gen = torch.Generator().manual_seed(seed)
    mags = scale * 2.0 ** (-spread * torch.rand(n, generator=gen))
    signs = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    return torch.cat([mags * signs, torch.zeros(zeros)])


def reference_zero_fraction(t: torch.Tensor, fmt: str) -> float:
    """Scale so that amax lands on the format's largest value, clamp, cast: the fraction of nonzero values that
    became zero."""
    dtype = FP8[fmt]
    fmax = torch.finfo(dtype).max
    nz = t[t != 0].double()
    q = (nz * (fmax / nz.abs().max())).clamp(-fmax, fmax).to(dtype)
    return (q.double() == 0).double().mean().item()


def expect_zero_fraction(fp8_zero_fraction: Callable[[torch.Tensor, str], float],
                         cases: list[tuple[torch.Tensor, str]]) -> None:
    """cases: (tensor, "e4m3" or "e5m2")."""
    fp8_zero_fraction = guarded(fp8_zero_fraction, reference_zero_fraction)
    for t, fmt in cases:
        got = fp8_zero_fraction(t.clone(), fmt)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, int | float):
            raise CheckFailed("a fraction (a float from 0 to 1)", repr(got))
        want = reference_zero_fraction(t, fmt)
        if abs(got - want) > 1e-6:
            raise CheckFailed(f"fp8_zero_fraction(<{t.numel():,} values, amax {t.abs().max().item():.3g}>, "
                              f"{fmt!r}) = {want:.6f}", f"{got:.6f}",
                              "count only nonzero values; scale by the format's max over the tensor's amax (of "
                              "the absolute values), clamp, cast, and count the zeros.")


PREDICT_FACTOR = 1.07  # a prediction passes within 7% of the analytic count (a sampled model lands within 1%)


def check_zero_fraction(prediction: float, reasoning: str, fp8_zero_fraction: Callable) -> Verdict:
    """Exercise 2.4: predict how many of Llama-3-8B's 7.5 billion Linear weights E4M3 flushes to zero after
    per-tensor scaling (analytic: no laptop samples that model first), then measure fractions on tensors that run."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float) or not guess > 0:
            raise CheckFailed("prediction as a positive number of weights", repr(guess))
        expect_reasoning(reasoning, "2.4")
        want = reference_flushed_model(LLAMA8B_LINEAR_WEIGHTS, "e4m3")
        if not want / PREDICT_FACTOR <= guess <= want * PREDICT_FACTOR:
            raise CheckFailed("a prediction within 7% of the expected count", repr(guess),
                              "each Linear weight has its own amax (how many standard deviations is the largest of n "
                              "normal draws?), which scaling puts at 448; zero begins below 2^-10 (half of E4M3's "
                              "smallest subnormal). Count the tensors of every shape: grouped-query k/v, the SwiGLU "
                              "MLP's three, the untied lm_head; the embedding is not a Linear.")
        expect_zero_fraction(fp8_zero_fraction, [(log_uniform(200_000, 24, 0), "e4m3"),
                                                 (log_uniform(5000, 10, 1, scale=1e-6), "e4m3")])

    return run_check("2.4", body, points=2)


# 2.5 -------------------------------------------------------------------------------------------------------------
def reference_quantize_blocks(t: torch.Tensor, fmt: str, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block scaled FP8 along the last dimension: blocks of `block` columns (the last one may be shorter), each
    with the float32 scale fmax / amax (1 for an all-zero block); (q of t's shape, scales of shape
    (*t.shape[:-1], ceil(K / block)))."""
    dtype = FP8[fmt]
    fmax = torch.finfo(dtype).max
    k = t.shape[-1]
    nb = -(-k // block)
    padded = torch.nn.functional.pad(t.float(), (0, nb * block - k)).reshape(*t.shape[:-1], nb, block)
    amax = padded.abs().amax(dim=-1)
    scales = torch.where(amax > 0, fmax / amax, torch.ones_like(amax))
    q = (padded * scales.unsqueeze(-1)).clamp(-fmax, fmax).to(dtype)
    return q.reshape(*t.shape[:-1], nb * block)[..., :k], scales


def expect_block_quantize(quantize_blocks: Callable, dequantize_blocks: Callable,
                          cases: list[tuple[torch.Tensor, str, int]]) -> None:
    """cases: (tensor, fmt, block). Codes bit for bit, scales, and the round trip."""
    quantize_blocks = guarded(quantize_blocks, reference_quantize_blocks, *TORCHAO_FP8)
    dequantize_blocks = guarded(dequantize_blocks, reference_quantize_blocks)
    for t, fmt, block in cases:
        what = f"a {tuple(t.shape)} tensor, {fmt}, block {block}"
        out = quantize_blocks(t.clone(), fmt, block)
        if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(o, torch.Tensor) for o in out)):
            raise CheckFailed("a tuple (fp8 tensor, scales)", repr(type(out)))
        q, scales = out
        want_q, want_scales = reference_quantize_blocks(t, fmt, block)
        if q.dtype != want_q.dtype or q.shape != want_q.shape:
            raise CheckFailed(f"an FP8 tensor of dtype {want_q.dtype} and t's shape {tuple(t.shape)} ({what})",
                              f"{q.dtype} of shape {tuple(q.shape)}")
        if tuple(scales.shape) != tuple(want_scales.shape):
            raise CheckFailed(f"scales of shape {tuple(want_scales.shape)} ({what})", f"{tuple(scales.shape)}",
                              "one scale per block of each row; a last block shorter than `block` still has one.")
        if torch.isnan(q.float()).any() or not torch.isfinite(scales).all():
            raise CheckFailed(f"no NaN codes and finite scales ({what})", "NaN or inf",
                              "an all-zero block has amax 0: give it scale 1; clamp before the cast.")
        if not torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)):
            bad = int((q.view(torch.uint8) != want_q.view(torch.uint8)).sum())
            raise CheckFailed(f"the reference's FP8 codes ({what})", f"{bad} of {t.numel()} codes differ",
                              "each block's scale maps its own largest MAGNITUDE to the format's max; blocks never "
                              "cross a row; clamp, then cast.")
        if not torch.allclose(scales.float(), want_scales, rtol=1e-6, atol=0):
            raise CheckFailed(f"scales fmax / amax per block ({what})", "other scales")
        back = dequantize_blocks(q, scales, block)
        want_back = (want_q.float().reshape(*t.shape[:-1], -1) /
                     want_scales.repeat_interleave(block, dim=-1)[..., :t.shape[-1]])
        if not (isinstance(back, torch.Tensor) and back.shape == t.shape
                and torch.allclose(back.float(), want_back, rtol=1e-6, atol=0)):
            raise CheckFailed(f"dequantize_blocks(q, scales, block) = q / its block's scale, shape {tuple(t.shape)}",
                              "other values" if isinstance(back, torch.Tensor) else repr(type(back)),
                              "the scale multiplied the values on the way in: divide on the way out, each column "
                              "by its own block's scale.")


def block_cases(seed: int) -> list[tuple[torch.Tensor, str, int]]:
    """A weight whose rows differ by orders of magnitude, a last dim that is not a multiple of the block (with an
    all-zero block and a row whose largest magnitude is negative), and a 3-D E5M2 activation."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(8, 96, generator=gen) * (10.0 ** torch.arange(-4, 4)).unsqueeze(1)
    ragged = torch.randn(5, 100, generator=gen) * 1e-2
    ragged[1, 32:64] = 0
    ragged[3, 70] = -4.0
    return [(rows, "e4m3", 32), (ragged, "e4m3", 32), (torch.randn(2, 3, 40, generator=gen) * 300, "e5m2", 16)]


def check_block_quantize(quantize_blocks: Callable, dequantize_blocks: Callable) -> Verdict:
    """Exercise 2.5: a colleague's per-block FP8 quantiser, fixed (blocks within rows, magnitudes, zero blocks,
    clamp, divide back)."""
    return run_check("2.5", lambda: expect_block_quantize(quantize_blocks, dequantize_blocks, block_cases(5)),
                     points=2)


# 2.6 -------------------------------------------------------------------------------------------------------------
# The OCP MX element formats (OCP Microscaling Formats v1.0, section 5.3): FP6 E2M3 and E3M2, FP4 E2M1. Unlike FP16
# they have no infinity and no NaN: every code is a finite number, the largest exponent field included.
MX_ELEMENT_FORMATS = {"fp4_e2m1": (2, 1), "fp6_e2m3": (2, 3), "fp6_e3m2": (3, 2)}


def reference_mx_element(code: int, exp_bits: int, man_bits: int) -> float:
    """The value of an all-finite minifloat code: sign, exp_bits exponent bits (bias 2^(exp_bits-1) - 1), man_bits
    mantissa bits; exponent field 0 is subnormal."""
    bias = 2 ** (exp_bits - 1) - 1
    sign = -1.0 if code >> (exp_bits + man_bits) & 1 else 1.0
    exp, man = code >> man_bits & (2**exp_bits - 1), code & (2**man_bits - 1)
    if exp == 0:
        return sign * man / 2**man_bits * 2.0 ** (1 - bias)
    return sign * (1 + man / 2**man_bits) * 2.0 ** (exp - bias)


def expect_mx_elements(decode_mx_element: Callable[[int, int, int], float], formats: list[tuple[int, int]]) -> None:
    """Every code of each (exp_bits, man_bits) format, signed zeros included."""
    for exp_bits, man_bits in formats:
        codes = range(2 ** (1 + exp_bits + man_bits))
        with own_work(reference_mx_element, decode, encode,
                      "torchao.prototype.custom_fp_utils:_floatx_unpacked_to_f32",
                      "torchao.prototype.mx_formats.kernels:f4_unpacked_to_f32",
                      "torchao.prototype.mx_formats.kernels:f6_e3m2_unpacked_to_f32",
                      "torchao.prototype.mx_formats.kernels:f6_e2m3_unpacked_to_f32"):
            answers = answer_each(decode_mx_element, [(code, exp_bits, man_bits) for code in codes])
        for code, got in zip(codes, answers, strict=True):
            want = reference_mx_element(code, exp_bits, man_bits)
            if isinstance(got, bool) or not isinstance(got, int | float) or got != want \
                    or math.copysign(1.0, got) != math.copysign(1.0, want):
                top = 2 ** (exp_bits + man_bits)
                hint = ("the largest exponent field is a normal binade here: MX element formats have no inf or NaN"
                        if (code % top) >> man_bits == 2**exp_bits - 1 else
                        "exponent field 0 is subnormal: no implicit 1, exponent 1 - bias"
                        if (code % top) >> man_bits == 0 else
                        f"bias = 2^(exp_bits - 1) - 1 = {2 ** (exp_bits - 1) - 1}; the sign is the top bit, bit "
                        f"{exp_bits + man_bits}")
                raise CheckFailed(f"decode_mx_element({code:#04x}, exp_bits={exp_bits}, man_bits={man_bits}) = "
                                  f"{want!r}", repr(got), hint)


def check_mx_element(decode_mx_element: Callable[[int, int, int], float]) -> Verdict:
    """Exercise 2.6: chapter 02's decoding carried to the MX element formats (FP4 E2M1, FP6 E2M3 and E3M2)."""
    return run_check("2.6", lambda: expect_mx_elements(decode_mx_element, [MX_ELEMENT_FORMATS["fp4_e2m1"],
                                                                           MX_ELEMENT_FORMATS["fp6_e3m2"]]),
                     points=2)
