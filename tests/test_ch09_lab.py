"""Lab 09's checks: the reference answers pass the public and the hidden cases, planted wrong answers fail them."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from utils.course.checks.ch09 import (
    LAB_CONFIG,
    check_chunked_loss,
    check_finetune,
    check_model_states,
    expect_chunked_loss,
    expect_model_states,
    lora_attention_count,
    states_per_gpu,
)
from utils.course.checks.core import CheckFailed
from utils.course.scenes.live_peak import LivePeak
from utils.lessons.experiment_sizes import ch09 as sizes
from utils.lessons.fsdp_demo import fsdp_peaks
from utils.lessons.sizes import TIERS, tier_budget

HIDDEN_FILE = Path(__file__).resolve().parents[1] / "grading" / "hidden" / "ch09.py"


def hidden():
    spec = importlib.util.spec_from_file_location("hidden_ch09", HIDDEN_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def own_states(n_params: int, stage: int, n_gpus: int, optimizer: str) -> float:
    """A learner's answer to 9.1, written again: BF16 weights 2, FP32 gradients 4, FP32 master 4 + moments."""
    k = 4 + (8 if optimizer == "adamw" else 2 * (1 + 4 / 256))
    return (2 / (n_gpus if stage >= 3 else 1) + 4 / (n_gpus if stage >= 2 else 1)
            + k / (n_gpus if stage >= 1 else 1)) * n_params


def colleague_script(*, probs_kept: bool, logits_kept: bool, eval_graph: bool):
    """Lab 9.3's script with any subset of its three bugs (all three: the script the lab shows)."""

    def finetune(model, opt, train, evals):
        losses, accs = [], []
        model.train()
        for x, y in train:
            logits = model(x)
            if probs_kept:
                probs = logits.softmax(-1)
                acc = (probs.argmax(-1) == y).float().mean()
            else:
                with torch.no_grad():
                    acc = (logits.argmax(-1) == y).float().mean()
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            if not logits_kept:
                del logits
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            accs.append(acc.item())
        model.eval()
        total = 0.0
        if eval_graph:
            for x, y in evals:
                total = total + F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            return losses, accs, (total / len(evals)).item()
        with torch.no_grad():
            for x, y in evals:
                total += F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
        return losses, accs, total / len(evals)

    return finetune


def _sum_chunk(h, w, t):
    return F.cross_entropy(h @ w.t(), t, reduction="sum", ignore_index=-100)


def own_chunked(hidden, weight, targets, chunk):
    """A learner's 9.5: one checkpointed chunk at a time, divided once by the tokens that are not padding."""
    total = hidden.new_zeros(())
    for s in range(0, hidden.shape[0], chunk):
        total = total + checkpoint(_sum_chunk, hidden[s:s + chunk], weight, targets[s:s + chunk], use_reentrant=False)
    return total / (targets != -100).sum()


def test_reference_answers_pass_public_and_hidden_cases(monkeypatch):
    assert check_model_states(own_states).status == "passed"
    hidden()["9.1"](own_states)
    clean = colleague_script(probs_kept=False, logits_kept=False, eval_graph=False)
    assert check_finetune(clean).status == "passed"
    hidden()["9.3"](clean)
    assert check_chunked_loss(own_chunked).status == "passed"
    hidden()["9.5"](own_chunked)
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert check_model_states(states_per_gpu).status == "failed"  # the check's reference, handed back: no marks


def test_planted_answers_fail_9_1(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)  # a failing verdict is what this test wants

    def tuned(n, stage, gpus, optimizer):  # right for the public cases only: forgets that stage 0 divides nothing
        return own_states(n, max(stage, 1), gpus, optimizer)

    assert check_model_states(tuned).status == "passed"
    with pytest.raises(CheckFailed):
        hidden()["9.1"](tuned)

    def master_with_weights(n, stage, gpus, optimizer):  # the FP32 master copy divided only at stage 3
        k = 8 if optimizer == "adamw" else 2 * (1 + 4 / 256)
        return ((2 + 4) / (gpus if stage >= 3 else 1) + 4 / (gpus if stage >= 2 else 1)
                + k / (gpus if stage >= 1 else 1)) * n

    assert check_model_states(master_with_weights).status == "failed"
    with pytest.raises(CheckFailed):  # chapter 09's torch.amp accounting (4 + 4 + 8), copied over
        expect_model_states(lambda n, s, g, o: (4 + 4 + 8 / (g if s >= 1 else 1)) * n, [(10**6, 1, 4, "adamw")])


@pytest.mark.parametrize("bug", ["probs_kept", "logits_kept", "eval_graph"])
def test_each_planted_bug_of_9_3_fails(bug, monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    one_bug = colleague_script(**{name: name == bug for name in ("probs_kept", "logits_kept", "eval_graph")})
    assert check_finetune(one_bug).status == "failed"
    with pytest.raises(CheckFailed, match="peak"):
        hidden()["9.3"](one_bug)


def test_9_3_rejects_tensors_and_changed_training(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    clean = colleague_script(probs_kept=False, logits_kept=False, eval_graph=False)

    def skips_a_step(model, opt, train, evals):
        return clean(model, opt, train[:-1], evals)

    def logs_tensors(model, opt, train, evals):
        losses, accs, ev = clean(model, opt, train, evals)
        return losses, accs, torch.tensor(ev)

    assert check_finetune(colleague_script(probs_kept=True, logits_kept=True, eval_graph=True)).status == "failed"
    assert check_finetune(skips_a_step).status == "failed"
    assert check_finetune(logs_tensors).status == "failed"
    assert check_finetune(None).status != "passed"


def test_planted_answers_fail_9_5(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def plain_loop(hidden, weight, targets, chunk):  # chunked forward, but every chunk is saved for backward
        total = hidden.new_zeros(())
        for s in range(0, hidden.shape[0], chunk):
            total = total + _sum_chunk(hidden[s:s + chunk], weight, targets[s:s + chunk])
        return total / (targets != -100).sum()

    def all_tokens(hidden, weight, targets, chunk):  # divides by every token, padding included
        return own_chunked(hidden, weight, targets, chunk) * (targets != -100).sum() / targets.numel()

    def full(hidden, weight, targets, chunk):
        return F.cross_entropy(hidden @ weight.t(), targets, ignore_index=-100)

    for wrong in (plain_loop, all_tokens, full):
        assert check_chunked_loss(wrong).status == "failed", wrong.__name__
    with pytest.raises(CheckFailed, match="loss"):  # right without padding (the public case pads): hidden fails
        expect_chunked_loss(all_tokens, [(768, 48, 16384, 64, 3, 2)])


def test_live_peak_counts_what_is_alive():
    with LivePeak() as live:
        a = torch.ones(1024)  # 4 KiB
        b = torch.ones(2048)  # 8 KiB
        del a
        c = torch.ones(512)  # 2 KiB
    assert live.peak == 4096 + 8192 and live.live == 8192 + 2048
    del b, c


def test_lora_count_formula():
    assert lora_attention_count(LAB_CONFIG, 8) == 6144


def test_full_sizes_fit_every_tier():
    for tier in TIERS:
        for name, nbytes in sizes.footprints(tier).items():
            assert 0 < nbytes <= tier_budget(tier), (tier, name)
    with pytest.raises(ValueError, match="tier"):
        sizes.footprints(12)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"width": 0}, "width"),
        ({"depth": "3"}, "depth"),
        ({"world_size": 1}, "world_size"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"timeout_s": "10"}, "timeout_s"),
        ({"batch": True}, "batch"),
    ],
)
def test_fsdp_peaks_validates_before_starting_processes(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        fsdp_peaks(**kwargs)


def test_work_hidden_from_the_tracker_is_not_measured_as_small(monkeypatch):
    """A script run in another thread escapes the (thread-local) tracker: the check refuses the tiny peak."""
    import threading

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    buggy = colleague_script(probs_kept=True, logits_kept=True, eval_graph=True)

    def in_a_thread(fn):
        def run(*args):
            out = []
            worker = threading.Thread(target=lambda: out.append(fn(*args)))
            worker.start()
            worker.join()
            return out[0]
        return run

    assert check_finetune(in_a_thread(buggy)).status == "failed"
    assert check_chunked_loss(in_a_thread(lambda h, w, t, c: F.cross_entropy(h @ w.t(), t))).status == "failed"
