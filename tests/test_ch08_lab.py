"""Lab 08 and chapter 08: the solutions pass the hidden cases, answers tuned to the public cases lose points, the
chapter's lesson code (extracted from the notebook) agrees with the checks' references, and full sizes fit."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
from lab_helpers import hidden_cases, solution_namespace

from utils.course.checks.ch08 import (
    E4M3,
    check_delayed_scaling,
    check_roundtrip,
    reference_mx_dequantize,
    reference_scale_and_clipped,
)
from utils.course.checks.core import CheckFailed
from utils.lessons.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parents[1]


def _hidden():
    return hidden_cases("08")


def _solution_namespace() -> dict:
    return solution_namespace("lab08_fp8_transformer_engine.ipynb")


def test_solutions_pass_hidden_cases():
    ns, hidden = _solution_namespace(), _hidden()
    hidden["8.1"](ns["delayed_scaling_run"])
    hidden["8.2"](ns["prediction"], ns["reasoning"], ns["mx_quantize"])
    hidden["8.3"](ns["fp8_roundtrip"])
    hidden["8.4"](ns["choose_fp8_recipe"])


def test_answers_tuned_to_public_cases_fail_hidden_ones(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")  # failing verdicts are looked at on purpose
    hidden = _hidden()

    def run(tensors, fmt, margin, history_len, algo, *, use_margin=True, keep_on_zero=True, window=True,
            own_amax=False):  # the exercise's simulation, with one switch per classic mistake
        fmax = torch.finfo(fmt).max
        history, scale, rows = [], 1.0, []
        for t in tensors:
            now = t.abs().max().item()
            past = history[-history_len:] if window else history
            amax = now if algo == "current" or own_amax else (max(past) if algo == "max" else past[-1]) if past else 0.0
            if amax > 0 or not keep_on_zero:
                scale = fmax / amax / 2**(margin if use_margin else 0) if amax > 0 else 1.0
            x = t * scale
            q = x.clamp(-fmax, fmax).to(fmt).float()
            rows.append((scale, int((x.abs() > fmax).sum()), int(((q == 0) & (t != 0)).sum())))
            history.append(now)
        return rows

    assert check_delayed_scaling(run).status == "passed"
    assert check_delayed_scaling(None).status != "passed"
    hidden["8.1"](run)
    assert check_delayed_scaling(lambda *a: run(*a, window=False)).status == "failed"  # never recovers
    assert check_delayed_scaling(lambda *a: run(*a, own_amax=True)).status == "failed"  # that is current scaling
    for tuned in ({"use_margin": False}, {"keep_on_zero": False}):  # the public cases have margin 0 and no zeros
        assert check_delayed_scaling(lambda *a, kw=tuned: run(*a, **kw)).status == "passed"
        with pytest.raises(CheckFailed):
            hidden["8.1"](lambda *a, kw=tuned: run(*a, **kw))

    def hopper_or_none(capability, te_version):  # knows the public GPUs only
        if tuple(capability) < (8, 9):
            return {"recipe": None, "context": None}
        recipe = "MXFP8BlockScaling" if tuple(capability) >= (10, 0) else "Float8CurrentScaling"
        return {"recipe": recipe, "context": "te.autocast" if tuple(te_version) >= (2, 9) else "te.fp8_autocast"}

    with pytest.raises(CheckFailed):
        hidden["8.4"](hopper_or_none)

    def no_zero_guard(t, fmt):
        scale = torch.finfo(fmt).max / t.abs().max()
        return (t * scale).clamp(-torch.finfo(fmt).max, torch.finfo(fmt).max).to(fmt).float() / scale

    with pytest.raises(CheckFailed):
        hidden["8.3"](no_zero_guard)

    def rowwise(t, fmt, *, dim=-1, zero_rows=True, whole_zero=True):  # the fix, with one switch per mistake
        fmax = torch.finfo(fmt).max
        if whole_zero and t.abs().max() == 0:
            return torch.zeros_like(t)
        amax = t.abs().amax(dim, keepdim=True)
        scale = torch.where(amax > 0, fmax / amax, torch.ones_like(amax)) if zero_rows else fmax / amax
        return (t * scale).clamp(-fmax, fmax).to(fmt).float() / scale

    assert check_roundtrip(rowwise).status == "passed"
    hidden["8.3"](rowwise)
    assert check_roundtrip(lambda t, f: rowwise(t, f, dim=0)).status == "failed"  # a scale per column
    assert check_roundtrip(no_zero_guard).status == "failed"  # per-tensor: the small rows lose their digits
    assert check_roundtrip(lambda t, f: rowwise(t, f, zero_rows=False)).status == "passed"  # no zero row in public
    with pytest.raises(CheckFailed):
        hidden["8.3"](lambda t, f: rowwise(t, f, zero_rows=False))


def _chapter_namespace() -> dict:
    """The lesson code of chapter 08 (its DelayedScaling and mx_blocks), executed from the notebook's cells."""
    nb = nbformat.read(ROOT / "notebooks" / "08_fp8_transformer_engine.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "class DelayedScaling" in c.source)
    fmax = {fmt: torch.finfo(fmt).max for fmt in (E4M3, torch.float8_e5m2)}
    ns: dict = {"torch": torch, "math": math, "E4M3": E4M3, "MAX": fmax}
    exec(source.split("def run_recipes")[0], ns)
    return ns


def test_chapter_delayed_scaling_and_mx_agree_with_the_checks():
    ns = _chapter_namespace()
    g = torch.Generator().manual_seed(0)
    for algo in ("max", "most_recent"):
        for margin in (0, 2):
            ds = ns["DelayedScaling"](E4M3, history_len=4, margin=margin, reduce=algo)
            history: list[float] = []
            for step in range(10):
                t = torch.randn(512, generator=g) * 1.4**step
                expected, _ = reference_scale_and_clipped(history[-4:], t, E4M3, margin, algo)
                assert ds.scale() == pytest.approx(expected, rel=1e-12)
                ds.update(t.abs().max().item())
                history.append(t.abs().max().item())
    t = torch.randn(64, 32, generator=g) * torch.exp2(torch.randint(-10, 11, (64, 32), generator=g).float())
    for rounding in ("floor", "up"):  # the lab's two roundings are the chapter's mx_scales
        assert torch.equal(ns["mx_blocks"](t, rounding=rounding)[0], reference_mx_dequantize(t, 32, rounding))


def test_full_sizes_fit_every_tier():
    from utils.lessons.experiment_sizes.ch08 import footprints

    for tier in TIERS:
        for name, nbytes in footprints(tier).items():
            assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes)
    with pytest.raises(ValueError, match="tier"):
        footprints(0)
