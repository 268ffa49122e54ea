"""Checks for lab 06 (gradient accumulation). The `expect_*` helpers run cases; the grader's hidden cases
(grading/hidden/ch06.py) call them with other micro-batch counts, seeds, scales and budgets."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answered,
    expect_equal,
    expect_reasoning,
    guarded,
    observe,
    run_check,
)
from utils.course.scenes.ch06 import (  # noqa: F401 - TinyMoE, moe_optimizers, tiny_llama and padded: the lab's names
    TinyMoE,
    moe_optimizers,
    moe_scene,
    padded,
    tiny_llama,
    token_normalised_scene,
    token_setup,
    weighted_scene,
    weighted_setup,
)
from utils.lessons.measure import saved_activation_bytes
from utils.lessons.models import GPT, GPTConfig

# 6.1 -------------------------------------------------------------------------------------------------------------
SMOOTHING = 0.1  # the teammate's label smoothing, which transformers' own causal-LM loss does not offer


def smoothed_target_losses(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """The SUM of the label-smoothed cross-entropies of a batch's shifted real targets (the logits of position t
    against the label of t + 1, padding's -100 ignored), and how many targets that is."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100,
                           label_smoothing=SMOOTHING, reduction="sum")
    return loss, int((targets != -100).sum())


def _big_batch(model: nn.Module, micro_batches: list[dict[str, torch.Tensor]]) -> None:
    """The teammate's loss as one big-batch backward: the micro-batches put back together, the mean over the whole
    batch's shifted real targets of their label-smoothed cross-entropy."""
    batch = {key: torch.cat([mb[key] for mb in micro_batches]) for key in micro_batches[0]}
    total, count = smoothed_target_losses(model, batch)
    (total / count).backward()


def expect_token_normalised(accumulate: Callable, cases: Sequence[tuple[int, int, int, int]]) -> None:
    """cases: (k, sequences, seed, all-padding sequences at the front). The accumulated .grad must equal one
    big-batch backward of the teammate's loss (the mean over the whole batch's shifted real targets of their
    label-smoothed cross-entropy), with one forward per micro-batch. The accumulation runs in a scene
    (utils.course.scenes.ch06), once with the learner's function and once with the big-batch backward."""
    for k, n, seed, empty in cases:
        seen = observe(token_normalised_scene, accumulate, k, n, seed, empty)
        reference = token_normalised_scene(_big_batch, k, n, seed, empty)
        rows, largest = seen["rows"], reference["largest"]
        if not seen["counted"]:
            raise CheckFailed("the check's count of the model's forwards left in place", "a forward hook removed, or a "
                              "forward it did not see", "run the model as it is: the check counts its forwards.")
        if not rows or max(rows) > largest:
            raise CheckFailed(f"one forward per micro-batch of at most {largest} sequences",
                              f"forwards of {rows} sequences" if rows else "no forward",
                              "accumulation exists because the whole batch does not fit: run the model on each "
                              "micro-batch, never on the concatenated batch.")
        for name, grad in zip(seen["names"], seen["grads"], strict=True):
            if grad is None:
                raise CheckFailed(f"a gradient for {name}", "None", "call backward() on each micro-batch's loss, and "
                                  "do not clear the gradients inside the loop.")
            if not torch.isfinite(grad).all():
                raise CheckFailed(f"finite gradients for {name} (k = {k}, {empty} all-padding sequences)",
                                  "NaN or inf", "a micro-batch without real targets has a mean of 0/0: do not divide "
                                  "by each micro-batch's own target count.")
        got = torch.cat([g.flatten() for g in seen["grads"]])
        want = torch.cat([g.flatten() for g in reference["grads"]])
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-6):
            rel = ((got - want).norm() / want.norm()).item()
            start, micro_batches = token_setup(k, n, seed, empty)  # the learner's start, built again from the case
            raise CheckFailed(f"the big batch's gradient (k = {k})", f"a relative error of {rel:.2e}",
                              _what_is_still_wrong(got, want, start, micro_batches))


def _parallel(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(b.norm() > 0) and abs(F.cosine_similarity(a, b, dim=0).item()) > 1 - 1e-5


def _unshifted_gradient(start: nn.Module, micro_batches: list) -> torch.Tensor:
    """The step's gradient with each position's logits scored against its OWN label (no shift), token-normalised."""
    m = copy.deepcopy(start)
    count = sum(int((mb["labels"] != -100).sum()) for mb in micro_batches)
    for mb in micro_batches:
        logits = m(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits
        loss = F.cross_entropy(logits.flatten(0, 1), mb["labels"].flatten(), ignore_index=-100,
                               label_smoothing=SMOOTHING, reduction="sum")
        (loss / max(count, 1)).backward()
    return torch.cat([p.grad.flatten() for p in m.parameters()])


def _what_is_still_wrong(got: torch.Tensor, want: torch.Tensor, start: nn.Module, micro_batches: list) -> str:
    """Name the bug that remains, from the shape of the learner's gradient: the last micro-batch's alone (cleared
    inside the loop), targets not shifted, the sum of per-micro-batch means (normalised per micro-batch), the right
    direction with the wrong size (a wrong count), or none of these."""
    per_batch, targets = [], []
    for mb in micro_batches:
        m = copy.deepcopy(start)
        total, n = smoothed_target_losses(m, mb)
        if n:
            total.backward()  # the micro-batch's summed target losses
            per_batch.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
            targets.append(n)
    if len(micro_batches) > 1 and per_batch and _parallel(got, per_batch[-1]) and not _parallel(want, per_batch[-1]):
        return ("only the last micro-batch's gradient is left: the gradients are cleared inside the loop, so they "
                "cannot add up over the micro-batches.")
    if _parallel(got, _unshifted_gradient(start, micro_batches)):
        return ("each position's logits are scored against its own token: a causal LM's logits at position t predict "
                "the token at t + 1, so shift them against the labels (the model's own loss does this for you).")
    means = [g / n for g, n in zip(per_batch, targets, strict=True)]
    if means and _parallel(got, sum(means)) and not _parallel(want, sum(means)):
        return ("the gradients add up now; what is still wrong is the normalisation: a micro-batch's mean over its "
                "own targets weights a short micro-batch like a long one. Sum each micro-batch's target losses and "
                "divide by the targets of the whole step.")
    if _parallel(got, want):
        return (f"the direction is right, the size is {(got.norm() / want.norm()).item():.3g} times the big batch's: "
                "the divisor must be the number of targets of the whole step, counted after the shift by one, once "
                "for the step.")
    return ("three things must hold: the gradients add up over the micro-batches (no clearing inside the loop), the "
            "logits of position t are scored against the label of t + 1, and each micro-batch's summed target "
            "losses are divided by the targets of the whole step.")


def check_token_normalised(accumulate: Callable) -> Verdict:
    """Exercise 6.1: fix a teammate's accumulation loop, with its own label-smoothed loss, for a Hugging Face Llama
    over padded micro-batches."""
    return run_check("6.1", lambda: expect_token_normalised(accumulate, [(4, 8, 0, 0), (2, 6, 1, 0)]), points=1)


# 6.2 -------------------------------------------------------------------------------------------------------------
# An 8B model (Llama 3 8B's 8.03e9 parameters), k = 16 micro-batches, Adam's default eps, per-element gradient
# magnitudes with log10|g| ~ Normal(-6, 1), and "changed" meaning an update more than 10% larger.
PREDICT_CASE = (8.03e9, 16, 1e-8, -6.0, 1.0, 0.10)  # parameters, k, eps, mean and sd of log10|g|, relative change


def params_changed_truth(n_params: float, k: int, eps: float, mu: float, sigma: float, change: float) -> float:
    """How many of `n_params` parameters, whose steady gradient magnitudes |g| have log10|g| ~ Normal(mu, sigma), get
    an Adam update more than (1 + change) times larger when the accumulation forgets / k.

    In a steady state (m_hat = g, sqrt(v_hat) = |g|) the update is lr*g/(|g| + eps) with / k and
    lr*k*g/(k*|g| + eps) without: their ratio k(|g| + eps)/(k|g| + eps) exceeds 1 + change exactly when
    |g| < eps (k - 1 - change) / (change * k); it never exceeds k, so for change >= k - 1 no parameter changes."""
    if k - 1 - change <= 0:
        return 0.0
    threshold = eps * (k - 1 - change) / (change * k)
    z = (math.log10(threshold) - mu) / sigma
    return n_params * 0.5 * math.erfc(-z / math.sqrt(2))


def expect_params_changed(params_changed: Callable, cases: Sequence[tuple[float, int, float, float, float, float]]
                          ) -> None:
    params_changed = guarded(params_changed, params_changed_truth)
    for case in cases:
        got = params_changed(*case)
        truth = params_changed_truth(*case)
        n, k, eps, mu, sigma, change = case
        what = (f"params_changed({n:.3g}, k={k}, eps={eps:g}, mu={mu:g}, sigma={sigma:g}, change={change:g})")
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
            raise CheckFailed(f"{what} as a number of parameters", repr(got))
        if abs(got - truth) > 0.01 * truth + 1e-9 * n:
            raise CheckFailed(f"{what} within 1% of {truth:.4g}", f"{got:.4g}",
                              "without / k Adam's update is lr*m/(sqrt(v) + eps/k): find the |g| below which "
                              "k(|g| + eps)/(k|g| + eps) exceeds 1 + change, then the share of a log-normal "
                              "below it (log10, not ln; the normal CDF is 0.5*erfc(-z/sqrt(2))).")


def check_adam_prediction(prediction: float, reasoning: str, params_changed: Callable) -> Verdict:
    """Exercise 6.2: predict how many of an 8B model's parameters get a larger Adam update without / k, then
    write the count as a function of k, eps and the gradient distribution."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float):
            raise CheckFailed("prediction as a number of parameters", repr(guess))
        expect_reasoning(reasoning, "6.2")
        truth = params_changed_truth(*PREDICT_CASE)
        if abs(guess - truth) > 0.15 * truth:
            raise CheckFailed(f"a prediction within 15% of {truth / 1e9:.2f} billion parameters", f"{guess:.4g}",
                              "without / k Adam's update is lr*m/(sqrt(v) + eps/k): find the gradient magnitude "
                              "below which that is more than 10% larger than lr*m/(sqrt(v) + eps), then count "
                              "the parameters below it.")
        expect_params_changed(params_changed, [PREDICT_CASE, (1e6, 4, 1e-8, -8.0, 0.5, 0.5)])

    return run_check("6.2", body, points=2)


# 6.3 -------------------------------------------------------------------------------------------------------------
def _moe_reference(model, optimizers, scaler, micro_batches, max_norm, alpha) -> None:
    k = len(micro_batches)
    for xs, ys in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            out, aux = model(xs)
            loss = (F.mse_loss(out, ys) + alpha * aux) / k
        scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)


def expect_moe_accumulation(moe_accumulation_step: Callable,
                            cases: Sequence[tuple[int, float, float, float, int, bool]]) -> None:
    """cases: (k, initial scale, max_norm, alpha, seed, poison: one micro-batch's input holds an inf). Two steps run
    in a scene (utils.course.scenes.ch06), once with the learner's step and once with the reference."""
    moe_accumulation_step = guarded(moe_accumulation_step, _moe_reference)
    for k, init_scale, max_norm, alpha, seed, poison in cases:
        got = observe(moe_scene, moe_accumulation_step, k, init_scale, max_norm, alpha, seed, poison)
        ref = moe_scene(_moe_reference, k, init_scale, max_norm, alpha, seed, poison)
        what = (f"k = {k}, initial scale {init_scale:g}, max_norm {max_norm:g}, alpha {alpha:g}"
                + (", an inf input" if poison else ""))
        for part in ("router", "experts", "head"):
            want, have = ref[part], got[part]
            if not torch.allclose(have, want, rtol=1e-4, atol=1e-6):
                raise CheckFailed(f"the reference's {part} parameters after two steps ({what})",
                                  f"a max difference of {(have - want).abs().max().item():.3g}",
                                  "both losses of every micro-batch go through the same scaler.scale and the same "
                                  "/ k; every optimizer's gradients are unscaled before the one global clip; then "
                                  "each optimizer steps, the scaler updates once, and every optimizer is cleared.")
        expect_equal(got["scale"], ref["scale"], f"the scaler's scale after two steps ({what})",
                     hint="call scaler.update() once per optimizer step, after stepping every optimizer.")
        if got["grads_left"]:
            raise CheckFailed("every gradient cleared after the step (each optimizer's zero_grad)", "gradients left")


def check_moe_accumulation(moe_accumulation_step: Callable) -> Verdict:
    """Exercise 6.3: fix a teammate's MoE accumulation step (two losses, two optimizers, GradScaler, clipping)."""
    return run_check("6.3", lambda: expect_moe_accumulation(
        moe_accumulation_step, [(4, 2.0**16, 1.0, 0.01, 0, False), (2, 2.0**10, 0.5, 0.1, 1, False)]), points=2)


# 6.4 -------------------------------------------------------------------------------------------------------------
def fewest_micro_batches(cfg: GPTConfig, batch: int, budget: int) -> int | None:
    """The smallest k dividing `batch` whose micro-batch saves at most `budget` bytes for backward."""
    torch.manual_seed(0)
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len))
    for k in range(1, batch + 1):
        if batch % k == 0 and saved_activation_bytes(model, x[: batch // k], x[: batch // k]) <= budget:
            return k
    return None


def expect_micro_plan(choose_micro_batches: Callable, cases: Sequence[tuple[GPTConfig, int, int]]) -> None:
    choose_micro_batches = guarded(choose_micro_batches, fewest_micro_batches)
    for cfg, batch, budget in cases:
        got = choose_micro_batches(cfg, batch, budget)
        expect_equal(got, fewest_micro_batches(cfg, batch, budget),
                     f"choose_micro_batches({cfg.n_layer} layers, d={cfg.d_model}, T={cfg.seq_len}, "
                     f"{cfg.attention}; batch {batch}, budget {budget:,} B)",
                     hint="try k = 1, 2, ... among the divisors of the batch; measure what one micro-batch of "
                     "batch // k sequences saves for backward (saved_activation_bytes); return the first that fits, "
                     "or None.")


def check_micro_plan(choose_micro_batches: Callable) -> Verdict:
    """Exercise 6.4: the fewest micro-batches whose activations fit a budget, measured."""

    def body() -> None:
        cfg = GPTConfig(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab_size=64)
        expect_micro_plan(choose_micro_batches, [(cfg, 12, 2**20), (cfg, 12, 200_000), (cfg, 8, 1_000)])

    return run_check("6.4", body, points=2)


# 6.5 -------------------------------------------------------------------------------------------------------------
def _big_batch_weighted(model: nn.Module, micro_batches: list, weights: torch.Tensor) -> None:
    """One big-batch backward of F.cross_entropy(logits, y, weight=weights, ignore_index=-100), its default mean."""
    x, y = (torch.cat(parts) for parts in zip(*micro_batches, strict=True))
    F.cross_entropy(model(x), y, weight=weights, ignore_index=-100).backward()


def expect_weighted_accumulation(accumulate_weighted: Callable, cases: Sequence[tuple[int, int, int, int, int]]
                                 ) -> None:
    """cases: (k micro-batches, batch n, classes, seed, ignored labels). The accumulated .grad must equal one
    big-batch backward of F.cross_entropy(logits, y, weight=weights, ignore_index=-100) (its default mean). The
    accumulation runs in a scene (utils.course.scenes.ch06), once with the learner's function, once with that
    big-batch backward."""
    for k, n, classes, seed, ignored in cases:
        seen = observe(weighted_scene, accumulate_weighted, k, n, classes, seed, ignored)
        grads = seen["grads"]
        reference = weighted_scene(_big_batch_weighted, k, n, classes, seed, ignored)["grads"]
        what = f"k = {k}, {n} images, {classes} weighted classes, {ignored} ignored labels"
        if not seen["counted"]:
            raise CheckFailed("the check's count of the model's forwards left in place", "a forward hook removed, or a "
                              "forward it did not see", "run the model as it is: the check counts its forwards.")
        if not seen["rows"] or max(seen["rows"]) > seen["largest"]:
            raise CheckFailed(f"one forward per micro-batch of at most {seen['largest']} images ({what})",
                              f"forwards of {seen['rows']} images" if seen["rows"] else "no forward",
                              "accumulation exists because the whole batch does not fit: run the model on each "
                              "micro-batch, never on the concatenated batch.")
        if any(g is None or not torch.isfinite(g).all() for g in grads):
            raise CheckFailed(f"finite gradients on every parameter ({what})", "a missing or non-finite .grad",
                              "a micro-batch whose labels are all ignored has zero weight: skip it or use "
                              "reduction='sum', never divide by its own zero.")
        got = torch.cat([g.flatten() for g in grads])
        want = torch.cat([q.flatten() for q in reference])
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-6):
            _, _, y, weights = weighted_setup(classes, n, seed, ignored)  # the case's labels and weights
            counted = (y != -100).sum().clamp_min(1)
            plain = want * weights[y[y != -100]].sum() / counted
            hint = ("this is the gradient normalised by the count of labels: a weighted mean divides by the sum of "
                    "the weights of the counted labels, weights[y].sum() over the whole step" if
                    torch.allclose(got, plain, rtol=1e-4, atol=1e-6) else
                    "sum each micro-batch's weighted loss (reduction='sum') and divide by the step's total weight, "
                    "weights[y[y != -100]].sum() over every micro-batch, computed before the first backward")
            raise CheckFailed(f"the big-batch gradient ({what})",
                              f"a relative error of {((got - want).norm() / want.norm()).item():.3g}", hint)


def check_weighted_accumulation(accumulate_weighted: Callable) -> Verdict:
    """Exercise 6.5: chapter 06's normalisation carried to a class-weighted loss on a CNN."""
    return run_check("6.5", lambda: expect_weighted_accumulation(accumulate_weighted,
                                                                 [(4, 16, 5, 0, 3), (2, 10, 3, 1, 0)]), points=2)
