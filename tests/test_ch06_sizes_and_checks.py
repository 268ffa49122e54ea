"""Chapter 06: full sizes fit every GPU tier; lab 06's checks reject the planted bugs, the hidden cases catch an
answer tuned to the public ones, and 6.2's analytic count agrees with torch's Adam."""

import functools
import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from utils.course.checks import ch06
from utils.lessons.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tier", TIERS)
def test_every_full_size_experiment_fits_the_tier(tier):
    from utils.lessons.experiment_sizes.ch06 import footprints

    for name, nbytes in footprints(tier).items():
        assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes / 2**30)
    with pytest.raises(ValueError, match="tier"):
        footprints(0)


def test_mem_shape_rebuilds_a_saved_runs_model():
    from utils.lessons.experiment_sizes.ch06 import MEM_SHAPE, mem_shape

    assert mem_shape() == MEM_SHAPE and mem_shape("full") == (4, 512, 512, 256)
    with pytest.raises(ValueError, match="size"):
        mem_shape("huge")


def _smoothed(model, batch, shift=True, reduction="sum"):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:] if shift else batch["labels"]
    logits = logits[:, :-1] if shift else logits
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=ch06.SMOOTHING,
                           reduction=reduction)


def mean_per_micro(model, micro_batches):
    """The teammate's loop with the clearing and the shift fixed: each micro-batch's mean loss / k."""
    for batch in micro_batches:
        (_smoothed(model, batch, reduction="mean") / len(micro_batches)).backward()


def token_normalised(model, micro_batches, shift=True, count_after_shift=True):
    """The fix (with both flags on); the shift left out, or the targets counted before the shift, plant a bug."""
    num_items = sum(int((b["labels"][:, 1:] if count_after_shift else b["labels"]).ne(-100).sum())
                    for b in micro_batches)
    for batch in micro_batches:
        (_smoothed(model, batch, shift=shift) / num_items).backward()


def moe_step(model, optimizers, scaler, micro_batches, max_norm, alpha, *, aux_scaled=True, unscale_all=True,
             clear_all=True, aux_over_k=True):
    """The right MoE step, or one of the teammate's bugs (each flag off plants one)."""
    k = len(micro_batches)
    for xs, ys in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            out, aux = model(xs)
        aux = alpha * aux / (k if aux_over_k else 1)
        if aux_scaled:
            scaler.scale(F.mse_loss(out, ys) / k + aux).backward()
        else:
            scaler.scale(F.mse_loss(out, ys) / k).backward(retain_graph=True)
            aux.backward()
    for opt in optimizers if unscale_all else optimizers[:1]:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
    for opt in optimizers if clear_all else optimizers[:1]:
        opt.zero_grad(set_to_none=True)


def test_planted_bugs_fail_public_checks(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")
    assert ch06.check_token_normalised(mean_per_micro).status == "failed"
    assert ch06.check_moe_accumulation(moe_step).status == "passed"
    for bug in ("aux_scaled", "unscale_all", "clear_all", "aux_over_k"):
        planted = functools.partial(moe_step, **{bug: False})
        assert ch06.check_moe_accumulation(planted).status == "failed", bug
    assert ch06.check_micro_plan(lambda cfg, batch, budget: batch).status == "failed"
    assert ch06.check_adam_prediction(..., "x", None).status == "not attempted"


def hidden():
    spec = importlib.util.spec_from_file_location("hidden06", ROOT / "grading" / "hidden" / "ch06.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.HIDDEN


def test_hidden_cases_catch_an_answer_tuned_to_the_public_ones():
    def tuned(model, micro_batches):  # right only for the public k (2 and 4)
        return (token_normalised if len(micro_batches) in (2, 4) else mean_per_micro)(model, micro_batches)

    assert ch06.check_token_normalised(tuned).status == "passed"
    with pytest.raises(ch06.CheckFailed):
        hidden()["6.1"](tuned)
    assert set(hidden()) == {"6.1", "6.2", "6.3", "6.4", "6.5"}


def test_lab06_weighted_answer_tuned_to_the_public_k_fails_hidden(monkeypatch):
    """Exercise 6.5: right only for the public k (2 and 4); the held-out cases use k = 8, 3 and 1."""
    def tuned(model, micro_batches, weights):
        total = sum(weights[y[y != -100]].sum() for _, y in micro_batches)
        for x, y in micro_batches:
            loss = F.cross_entropy(model(x), y, weight=weights, ignore_index=-100, reduction="sum")
            (loss / (total if len(micro_batches) in (2, 4) else len(micro_batches))).backward()

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert ch06.check_weighted_accumulation(tuned).status == "passed"
    with pytest.raises(ch06.CheckFailed):
        hidden()["6.5"](tuned)


def test_lab06_each_bug_fails_with_a_hint_that_names_it(monkeypatch):
    """Exercise 6.1 (the teammate computes a label-smoothed loss from the logits, so transformers' num_items_in_batch
    does not apply; review s9 S16: the old exercise's fix was chapter 06's cell): no shift, a count before the shift,
    the model's own loss (no label smoothing) and the batch in one forward each fail with the hint that names it."""
    def model_loss(model, micro_batches):  # transformers' loss: right shift and count, but no label smoothing
        num_items = sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro_batches)
        for batch in micro_batches:
            model(**batch, num_items_in_batch=num_items).loss.backward()

    def concatenated(model, micro_batches):  # the big batch in one forward: not accumulation
        token_normalised(model, [{key: torch.cat([b[key] for b in micro_batches]) for key in micro_batches[0]}])

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert ch06.check_token_normalised(token_normalised).status == "passed"
    for wrong, says in ((functools.partial(token_normalised, shift=False), "own token"),
                        (functools.partial(token_normalised, count_after_shift=False), "counted after the shift"),
                        (mean_per_micro, "normalisation"), (model_loss, ""),
                        (concatenated, "one forward per micro-batch")):
        verdict = ch06.check_token_normalised(wrong)
        assert verdict.status == "failed" and says in verdict.message, (wrong, verdict.message)


def test_lab06_adam_count_agrees_with_torch_adam():
    """6.2's reference (a steady-state derivation) against torch.optim.Adam run on sampled gradients, x1 and x k."""
    n, k, eps, mu, sigma, change = 200_000, 16, 1e-8, -8.0, 1.0, 0.10
    g = torch.Generator().manual_seed(0)
    grad = 10 ** (mu + sigma * torch.randn(n, generator=g, dtype=torch.float64))
    grad *= torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    moved = []
    for factor in (1, k):
        p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float64))
        opt = torch.optim.Adam([p], lr=1e-3, eps=eps)
        for _ in range(5):
            p.grad = grad * factor
            opt.step()
        moved.append(p.detach().abs())
    measured = ((moved[1] / moved[0]) > 1 + change).double().mean().item()
    assert abs(measured - ch06.params_changed_truth(1.0, k, eps, mu, sigma, change)) < 0.005
    assert ch06.params_changed_truth(*ch06.PREDICT_CASE) > 1e9  # the 8B case: about 1.2 billion parameters


def test_lab06_adam_plausible_wrong_answers_fail(monkeypatch):
    """Exercise 6.2: 'every gradient below eps changes', ln for log10, and an answer tuned to the public cases."""
    def below_eps(n, k, eps, mu, sigma, change):
        return n * 0.5 * math.erfc(-((math.log10(eps) - mu) / sigma) / math.sqrt(2))

    def natural_log(n, k, eps, mu, sigma, change):
        t = eps * (k - 1 - change) / (change * k)
        return n * 0.5 * math.erfc(-((math.log(t) - mu) / sigma) / math.sqrt(2))

    public = {ch06.PREDICT_CASE: ch06.params_changed_truth(*ch06.PREDICT_CASE),
              (1e6, 4, 1e-8, -8.0, 0.5, 0.5): ch06.params_changed_truth(1e6, 4, 1e-8, -8.0, 0.5, 0.5)}

    def tuned(*case):
        return public.get(case, below_eps(*case))

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    truth = ch06.params_changed_truth(*ch06.PREDICT_CASE)
    words = "the ratio k(g + eps)/(kg + eps) exceeds 1.1 below a threshold, then the normal CDF gives the share"
    assert ch06.check_adam_prediction(truth, words, below_eps).status == "failed"
    assert ch06.check_adam_prediction(truth, words, natural_log).status == "failed"
    assert ch06.check_adam_prediction(8.03e9 * 0.5, words, tuned).status == "failed"  # a guess, not a derivation
    assert ch06.check_adam_prediction(truth, words, tuned).status == "passed"
    with pytest.raises(ch06.CheckFailed):
        hidden()["6.2"](truth, words, tuned)


def test_lab06_moe_answer_tuned_to_the_public_k_fails_hidden(monkeypatch):
    """Exercise 6.3: right only for the public k (2 and 4); the held-out cases use k = 1, 3 and 6 and an overflow."""
    def tuned(model, optimizers, scaler, micro_batches, max_norm, alpha):
        moe_step(model, optimizers, scaler, micro_batches, max_norm, alpha, unscale_all=len(micro_batches) in (2, 4))

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert ch06.check_moe_accumulation(tuned).status == "passed"
    with pytest.raises(ch06.CheckFailed):
        hidden()["6.3"](tuned)
