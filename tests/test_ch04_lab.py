"""Lab 04: the solutions pass the hidden cases, answers tuned to the public cases lose points there, and the
chapter's full sizes fit every tier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lab_helpers import hidden_cases, solution_namespace

from utils.checks.core import CheckFailed
from utils.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parents[1]


def _hidden():
    return hidden_cases("04")


def _solution_namespace() -> dict:
    return solution_namespace("lab04_automatic_mixed_precision.ipynb")


def test_solutions_pass_hidden_cases_quick_ones():
    ns, hidden = _solution_namespace(), _hidden()
    hidden["4.1"](ns["needs_grad_scaler"])
    hidden["4.4"](ns["choose_recipe"])


def test_solution_passes_hidden_clipping_and_bytes_cases():
    ns, hidden = _solution_namespace(), _hidden()
    hidden["4.3"](ns["train_step"])
    hidden["4.2"](ns["prediction"], ns["reasoning"], ns["bytes_per_param"])


def test_answers_tuned_to_public_cases_fail_hidden_ones():
    hidden = _hidden()
    table = {("cuda", None): True, ("cpu", None): False, ("cuda", torch.bfloat16): False}
    with pytest.raises(CheckFailed):
        hidden["4.1"](lambda device_type, dtype: table.get((device_type, dtype), device_type == "cuda"))
    public = {(7, 5): {"autocast_dtype": torch.float16, "grad_scaler": True, "fp32_precision": "ieee"}}

    def by_name(capability):
        return public.get(tuple(capability), {"autocast_dtype": torch.bfloat16, "grad_scaler": False,
                                              "fp32_precision": "tf32"})

    with pytest.raises(CheckFailed):
        hidden["4.4"](by_name)


def test_buggy_clipping_fails_the_public_check(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    from utils.checks.ch04 import check_clipped_step

    def clip_before_unscale(model, optimizer, scaler, x, y, max_norm):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    verdict = check_clipped_step(clip_before_unscale)
    assert verdict.status == "failed" and "unscale_" in verdict.message


def test_full_sizes_fit_every_tier():
    from utils.experiment_sizes.ch04 import footprints

    for tier in TIERS:
        for name, nbytes in footprints(tier).items():
            assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes)
    with pytest.raises(ValueError, match="tier"):
        footprints(12)


def test_lab04_training_states_without_step_counters_fail(monkeypatch):
    """Exercise 4.5: an answer that forgets the 4-byte FP32 step counter per parameter tensor fails the public
    check (Adagrad keeps one)."""
    from utils.checks.ch04 import check_training_states

    buffers = {"sgd": 0, "sgd-momentum": 1, "adamw": 2, "adagrad": 1, "rmsprop": 1, "rmsprop-centered": 2}

    def no_counters(model, optimizer, recipe):
        size = 2 if recipe == "pure-bf16" else 4
        return sum(p.numel() * size * (1 + (1 + buffers[optimizer] if p.requires_grad else 0))
                   for p in model.parameters())

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert check_training_states(no_counters).status == "failed"
