"""Chapter 03: gradients are sampled at every size (issue 12, bug 4), and the notebook's sampler is sound."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
import torch

from utils.lessons.experiment_sizes import ch03
from utils.lessons.sizes import TIERS, pick, tier_budget

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_loss_scaling.ipynb"


def notebook_function(name: str):
    """Exec the notebook cell's definition of `name` (the lesson's own code) and return it."""
    nb = nbformat.read(NOTEBOOK, 4)
    for cell in nb.cells:
        if cell.cell_type == "code" and f"def {name}(" in cell.source:
            tree = ast.parse(cell.source)
            node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
            namespace = {"torch": torch}
            exec(compile(ast.Module([node], []), str(NOTEBOOK), "exec"), namespace)
            return namespace[name]
    raise AssertionError(f"{name} not found in {NOTEBOOK.name}")


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_sample_is_bounded_at_every_size(size):
    # The old code took pick(200_000, 10**9): no sampling at full size, ~455M values to the host in float64.
    assert pick(200_000, 2_000_000, tiny=5_000, size=size) <= 2_000_000
    assert ch03.SAMPLE <= 2_000_000


def test_notebook_samples_on_every_size():
    source = "\n".join(c.source for c in nbformat.read(NOTEBOOK, 4).cells if c.cell_type == "code")
    assert "10**9" not in source and "SAMPLE" in source
    assert "sample_values(param_grads_fp32, SAMPLE)" in source


def test_full_size_fits_every_tier():
    for tier in TIERS:
        for name, bytes_ in ch03.footprints(tier).items():
            assert 0 < bytes_ <= tier_budget(tier), (tier, name, bytes_)
    with pytest.raises(ValueError, match="tier"):
        ch03.footprints(12)


def test_sample_values_draws_n_values_in_proportion():
    sample_values = notebook_function("sample_values")
    small, large = torch.full((1000,), 1.0), torch.full((9000,), 2.0)
    s = sample_values([small, large], 20_000, seed=0)
    assert s.numel() == 20_000 and s.dtype == torch.float64
    assert set(s.unique().tolist()) <= {1.0, 2.0}
    assert abs((s == 1.0).double().mean().item() - 0.1) < 0.01  # drawn in proportion to size
    assert torch.equal(sample_values([small, large], 500, seed=3), sample_values([small, large], 500, seed=3))
