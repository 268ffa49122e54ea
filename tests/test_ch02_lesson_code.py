"""Chapter 02's lesson code, extracted from the notebook, agrees with the packaged codecs (utils.lessons.formats)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import nbformat
import pytest
import torch

from utils.lessons.experiment_sizes import ch02
from utils.lessons.formats import FORMATS, decode, encode, format_properties
from utils.lessons.sizes import TIERS, tier_budget

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_number_formats.ipynb"


def notebook_functions(*names: str, **extra) -> dict:
    """Exec the notebook's definitions of `names` (the lesson's own code) in a namespace and return it."""
    namespace = {"torch": torch, "math": math, **extra}
    found = set()
    for cell in nbformat.read(NOTEBOOK, 4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                exec(compile(ast.Module([node], []), str(NOTEBOOK), "exec"), namespace)
                found.add(node.name)
    assert found == set(names), set(names) - found
    return namespace


FP4_VALUES = torch.tensor([decode(c, "fp4_e2m1") for c in range(8)])
CODEC_FORMATS = ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]


def _codec_inputs(fmt: str, seed: int) -> list[float | int]:
    """Values that exercise every branch of an encoder: random magnitudes over every binade and beyond, the exact
    midpoint between neighbouring codes (ties; every code where the format is small), values just either side of
    a midpoint, both ends of the subnormal range, overflow, infinities, signed zeros and integers beyond 2**53."""
    p = format_properties(fmt)
    gen = torch.Generator().manual_seed(seed)
    lo, hi = math.log2(p["smallest_subnormal"]) - 3, math.log2(p["largest"]) + 3
    mags = 2.0 ** (lo + (hi - lo) * torch.rand(5000, generator=gen, dtype=torch.float64))
    signs = torch.randint(0, 2, (5000,), generator=gen) * 2 - 1
    values: list[float | int] = (mags * signs).tolist()
    top = encode(p["largest"], fmt)
    codes = range(top) if top < 2**16 else torch.randint(0, top, (5000,), generator=gen).tolist()
    for c in codes:
        mid = (decode(c, fmt) + decode(c + 1, fmt)) / 2  # exact in float64 (25 significant bits at most)
        values += [mid, -mid, math.nextafter(mid, 0.0), math.nextafter(mid, math.inf)]
    values += [0.0, -0.0, p["smallest_subnormal"], p["smallest_subnormal"] / 2, p["smallest_subnormal"] * 0.75,
               p["smallest_normal"], p["largest"], p["largest"] * 1.01, p["largest"] * 2, 1e300, -1e300,
               math.inf, -math.inf, 2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**200 + 1, 10**400, 0, 1, -7]
    return values


@pytest.mark.parametrize("fmt", CODEC_FORMATS)
def test_encode_once_matches_the_packaged_codec(fmt):
    """The chapter's encoder (section 1) and utils.lessons.formats.encode give the same bit pattern on every value:
    ties, subnormals, overflow and saturation, infinities, signed zeros and integers of any size."""
    ns = notebook_functions("encode_once")
    f = FORMATS[fmt]
    values = _codec_inputs(fmt, seed=CODEC_FORMATS.index(fmt))
    got = [ns["encode_once"](v, f.exp_bits, f.man_bits, finite_only=fmt == "fp8_e4m3") for v in values]
    want = [encode(v, fmt) for v in values]
    bad = [(v, g, w) for v, g, w in zip(values, got, want, strict=True) if g != w]
    assert not bad, bad[:5]
    assert len(values) > 5000


def test_encode_once_rounds_ties_to_even_and_once():
    ns = notebook_functions("encode_once")
    enc = ns["encode_once"]
    assert enc(1 + 2**-11, 5, 10) == 0x3C00 and enc(1 + 3 * 2**-11, 5, 10) == 0x3C02  # ties to the even code
    assert enc(2.0**-25, 5, 10) == 0 and enc(3 * 2.0**-26, 5, 10) == 1  # the subnormal end
    assert enc(65520.0, 5, 10) == 0x7C00 and enc(65519.99, 5, 10) == 0x7BFF  # overflow at the midpoint
    assert enc(500.0, 4, 3, finite_only=True) == 0x7E and enc(-math.inf, 4, 3, finite_only=True) == 0xFE
    assert enc(2**60 + 2**36 + 1, 8, 23) == 0x5D800001 != enc(float(2**60 + 2**36 + 1), 8, 23)  # once vs twice


def test_round_fp4_matches_the_codec_ties_included():
    ns = notebook_functions("round_fp4", FP4_VALUES=FP4_VALUES)
    gen = torch.Generator().manual_seed(0)
    xs = torch.cat([torch.linspace(-8, 8, 4097), (torch.rand(20_000, generator=gen) - 0.5) * 16,
                    torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 100.0, -100.0])])
    got = ns["round_fp4"](xs)
    want = torch.tensor([decode(encode(v, "fp4_e2m1"), "fp4_e2m1") for v in xs.tolist()])
    assert torch.equal(got.abs(), want.abs())  # (the sign of a zero is not compared)


def test_round_to_tf32_matches_the_codec():
    ns = notebook_functions("round_to_tf32")
    gen = torch.Generator().manual_seed(1)
    xs = torch.randn(20_000, generator=gen) * 2.0 ** torch.randint(-120, 120, (20_000,), generator=gen)
    got = ns["round_to_tf32"](xs)
    want = torch.tensor([decode(encode(v, "tf32"), "tf32") for v in xs.tolist()])
    assert torch.equal(got, want)


def test_nvfp4_two_levels_keep_small_tensors():
    ns = notebook_functions("round_fp4", "nvfp4", "nvfp4_one_level", FP4_VALUES=FP4_VALUES, E4M3_MAX=448.0,
                            FP4_MAX=6.0)
    gen = torch.Generator().manual_seed(2)
    t = torch.randn(4096, generator=gen) * 1e-5
    err = lambda q: ((q - t).norm() / t.norm()).item()  # noqa: E731
    assert err(ns["nvfp4"](t)) < 0.2 and err(ns["nvfp4_one_level"](t)) > 0.9
    w = torch.randn(4096, generator=gen)
    assert abs(((ns["nvfp4"](w) - w).norm() / w.norm()).item() - ((ns["nvfp4_one_level"](w) - w).norm()
                                                                  / w.norm()).item()) < 0.05


@pytest.mark.parametrize("tier", TIERS)
def test_full_size_fits_every_tier(tier):
    for name, bytes_ in ch02.footprints(tier).items():
        assert 0 < bytes_ <= tier_budget(tier), (name, bytes_)


def test_fp8_cell_assertions_hold_for_both_torch_cast_semantics():
    """Section 5's assertions must hold on every supported torch: run the cell with this torch's eager casts,
    then again with the pre-2.12 semantics emulated (|x| > 464 and inf become NaN in float8_e4m3fn)."""
    cells = [c.source for c in nbformat.read(NOTEBOOK, 4).cells if c.cell_type == "code"]
    i = next(k for k, s in enumerate(cells) if s.startswith("probe = torch.tensor"))

    class _Run:
        def figure(self, *args, **kwargs):
            return None

    ns = {"torch": torch, "math": math, "decode": decode, "encode": encode, "run": _Run(),
          "show_table": lambda rows, head: None, "print": lambda *a, **k: None}
    exec(cells[i], ns)
    exec(cells[i + 1], ns)
    old = ns["eager"].clone()
    old[(ns["probe"].abs() > 464) | ns["probe"].isinf()] = math.nan
    ns["eager"] = old
    exec(cells[i + 1], ns)
    if torch.__version__ >= "2.12":
        assert ns["saturates"]
