"""Lab 04: the solutions pass the hidden cases, answers tuned to the public cases lose points there, and the
chapter's full sizes fit every tier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lab_helpers import hidden_cases, solution_namespace

from utils.course.checks.core import CheckFailed
from utils.lessons.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parents[1]


def _hidden():
    return hidden_cases("04")


def _solution_namespace() -> dict:
    return solution_namespace("lab04_automatic_mixed_precision.ipynb")


def test_solutions_pass_hidden_cases_quick_ones():
    ns, hidden = _solution_namespace(), _hidden()
    hidden["4.1"](ns["autocast_dtypes"])
    hidden["4.4"](ns["choose_recipe"])


def test_solution_passes_hidden_clipping_and_bytes_cases():
    ns, hidden = _solution_namespace(), _hidden()
    hidden["4.3"](ns["train_step"])
    hidden["4.2"](ns["prediction"], ns["reasoning"], ns["bytes_per_param"])


def test_answers_tuned_to_public_cases_fail_hidden_ones():
    hidden = _hidden()
    public = {"proj": torch.bfloat16, "norm_proj": torch.bfloat16, "norm_input": torch.float32,
              "scores": torch.bfloat16, "probs": torch.bfloat16, "cdf": torch.bfloat16, "peaked": torch.bfloat16,
              "skip": torch.float32, "residual": torch.float32, "confidence": torch.float32, "loss": torch.float32}
    with pytest.raises(CheckFailed):  # the public answer, written as a table
        hidden["4.1"](lambda autocast_dtype, input_dtype: dict(public))
    public_recipe = {(7, 5): {"autocast_dtype": torch.float16, "grad_scaler": True, "fp32_precision": "ieee"}}

    def by_name(capability, n_params, memory_bytes):
        recipe = public_recipe.get(tuple(capability), {"autocast_dtype": torch.bfloat16, "grad_scaler": False,
                                                       "fp32_precision": "tf32"})
        return {**recipe, "weights": torch.float32 if 16 * n_params <= memory_bytes else None}

    with pytest.raises(CheckFailed):
        hidden["4.4"](by_name)


def test_lab04_recipe_mistakes_fail_the_public_check(monkeypatch):
    """Exercise 4.4: pure BF16 on a T4, autocast kept on a BF16 model, and a strict < at the budget fail; the
    solution passes public and held-out cases."""
    from utils.course.checks.ch04 import check_recipe

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    right, hidden = _solution_namespace()["choose_recipe"], _hidden()
    assert check_recipe(right).status == "passed"
    hidden["4.4"](right)

    def bf16_anywhere(capability, n_params, memory_bytes):
        out = right(capability, n_params, memory_bytes)
        return {**out, "autocast_dtype": None, "weights": torch.bfloat16} if out["weights"] is None \
            and 8 * n_params <= memory_bytes else out

    def autocast_kept(capability, n_params, memory_bytes):
        out = right(capability, n_params, memory_bytes)
        return {**out, "autocast_dtype": torch.bfloat16} if out["weights"] == torch.bfloat16 else out

    def strict(capability, n_params, memory_bytes):
        return right(capability, n_params, memory_bytes - 1)

    assert check_recipe(bf16_anywhere).status == "failed"
    assert check_recipe(autocast_kept).status == "failed"
    assert check_recipe(strict).status == "passed"  # no public case sits on the edge
    with pytest.raises(CheckFailed):
        hidden["4.4"](strict)


def test_lab04_cuda_policy_on_the_cpu_fails(monkeypatch):
    """Exercise 4.1: CUDA's FP32 list (layer norm, softmax, cumsum in FP32) applied on the CPU fails, and so does
    'everything in the autocast dtype'."""
    from utils.course.checks.ch04 import check_autocast_dtypes

    def cuda_policy(autocast_dtype, input_dtype):
        low, f32 = autocast_dtype, torch.float32
        return {"proj": low, "norm_proj": f32, "norm_input": f32, "scores": low, "probs": f32, "cdf": f32,
                "peaked": low, "skip": f32, "residual": f32, "confidence": f32, "loss": f32}

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert check_autocast_dtypes(cuda_policy).status == "failed"
    assert check_autocast_dtypes(lambda a, i: dict.fromkeys(cuda_policy(a, i), a)).status == "failed"


def _step(mean=True, unscale_all=True, update_once=True, clip_first=False):
    def train_step(model, optimizers, scaler, micro_batches, max_norm):
        total = 0.0
        for x, y in micro_batches:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x, y)
            scaler.scale(loss / len(micro_batches) if mean else loss).backward()
            total += loss.item()
        if clip_first:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        for opt in optimizers if unscale_all else optimizers[:1]:
            scaler.unscale_(opt)
        if not clip_first:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        for opt in optimizers:
            scaler.step(opt)
            if not update_once:
                scaler.update()
        if update_once:
            scaler.update()
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        return total / len(micro_batches)

    return train_step


def test_lab04_each_planted_bug_fails_the_public_check(monkeypatch):
    """Exercise 4.3: the colleague's loop, and each of its three bugs (and the chapter's clip-before-unscale) left
    alone, fail; the fix passes the public and held-out cases."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    from utils.course.checks.ch04 import check_clipped_step

    assert check_clipped_step(_step()).status == "passed"
    _hidden()["4.3"](_step())
    for bug in ({"mean": False}, {"unscale_all": False}, {"update_once": False}, {"clip_first": True},
                {"mean": False, "unscale_all": False, "update_once": False}):
        assert check_clipped_step(_step(**bug)).status == "failed", bug


def test_lab04_prediction_is_for_an_8b_model(monkeypatch):
    """Exercise 4.2: the graded figures are Llama-3-8B's under two recipes chapter 04 did not count (AMP with 8-bit
    AdamW, 10.03 B/param; pure BF16 with a Kahan buffer, 10); counting autocast's BF16 copies, one byte for both 8-bit
    moments, BF16 gradients under autocast, an FP32 Kahan buffer, a tied head, no GQA or GB for GiB fails (review
    s13 L04.1: the old recipes, 16 and 8 B/param, were the chapter's and lab 1.7's). A deep MLP's measured AMP peak
    tends to 16 B/param."""
    from utils.course.checks.ch04 import backward_peak_truth, check_bytes_per_param, reference_bytes_per_param
    from utils.ledger.architectures import PUBLISHED_PARAMS
    from utils.lessons.measure import step_peak
    from utils.lessons.models import mlp

    n = 2 * 128_256 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096
    assert n == PUBLISHED_PARAMS["Llama-3-8B"]
    truth = backward_peak_truth()
    eight_bit = 4 + 2 * (1 + 4 / 256) + 4
    assert truth == {"amp-8bit-adam": n * eight_bit / 2**30, "pure-bf16-kahan": n * 10 / 2**30}

    torch.manual_seed(0)
    net, x = mlp(64, 256, 64, depth=16), torch.randn(2, 64)
    opt = torch.optim.AdamW(net.parameters())

    def forward_backward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = net(x).float().pow(2).mean()
        loss.backward()

    forward_backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    measured = step_peak(forward_backward, net, opt, warmup=0) / sum(p.numel() for p in net.parameters())
    assert 16 <= measured < 16.2

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    words = "weights, gradients, 8-bit moments with their scales or BF16 moments and a Kahan buffer, in bytes"
    no_gqa, tied = n + 32 * 2 * 4096 * 3072, n - 128_256 * 4096

    def recipes(amp: float, kahan: float, params: int = n, unit: float = 2**30) -> dict:
        return {"amp-8bit-adam": params * amp / unit, "pure-bf16-kahan": params * kahan / unit}

    for wrong in (recipes(eight_bit + 2, 10), recipes(4 + 1 + 4, 10), recipes(4 + 2 * (1 + 4 / 256) + 2, 10),
                  recipes(eight_bit, 12), recipes(eight_bit, 10, tied), recipes(eight_bit, 10, no_gqa),
                  recipes(eight_bit, 10, unit=1e9)):
        verdict = check_bytes_per_param(wrong, words, lambda *c: 0.0)
        assert verdict.status == "failed" and "GiB" in verdict.message, wrong
    verdict = check_bytes_per_param(truth, words, lambda h, p, a: reference_bytes_per_param(h, p, a) * 1.0)
    assert verdict.status == "failed" and "your own code" in verdict.message


def test_full_sizes_fit_every_tier():
    from utils.lessons.experiment_sizes.ch04 import footprints

    for tier in TIERS:
        for name, nbytes in footprints(tier).items():
            assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes)
    with pytest.raises(ValueError, match="tier"):
        footprints(12)


def test_lab04_training_states_without_step_counters_fail(monkeypatch):
    """Exercise 4.5: an answer that forgets the 4-byte FP32 step counter per parameter tensor fails the public
    check (Adagrad keeps one)."""
    from utils.course.checks.ch04 import check_training_states

    buffers = {"sgd": 0, "sgd-momentum": 1, "adamw": 2, "adagrad": 1, "rmsprop": 1, "rmsprop-centered": 2}

    def no_counters(model, optimizer, recipe):
        size = 2 if recipe == "pure-bf16" else 4
        return sum(p.numel() * size * (1 + (1 + buffers[optimizer] if p.requires_grad else 0))
                   for p in model.parameters())

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert check_training_states(no_counters).status == "failed"


def test_lab04_switching_autocast_on_by_hand_does_not_pass(monkeypatch):
    """4.1 asks for a prediction: re-running the scorer's ops with torch.set_autocast_enabled (no `with
    torch.autocast`, no RetrievalScorer) is measuring, and fails."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    from torch import nn

    from utils.course.checks.ch04 import check_autocast_dtypes

    def by_hand(autocast_dtype, input_dtype):
        linear = nn.Linear(8, 8).to(input_dtype)
        torch.set_autocast_dtype("cpu", autocast_dtype)
        torch.set_autocast_enabled("cpu", True)
        try:
            proj = linear(torch.randn(4, 8, dtype=input_dtype))
        finally:
            torch.set_autocast_enabled("cpu", False)
        return {"proj": proj.dtype}

    verdict = check_autocast_dtypes(by_hand)
    assert verdict.status == "failed" and "set_autocast_enabled" in verdict.message
