"""Chapter 02's lesson code, extracted from the notebook, agrees with the packaged codecs (utils.formats)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import nbformat
import pytest
import torch

from utils.experiment_sizes import ch02
from utils.formats import decode, encode
from utils.sizes import TIERS, tier_budget

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
