"""A prediction's check never prints the true value when the prediction misses (review s14b R22: 0.4, 3.1 and 4.2
printed it in their NOT YET message, so a learner could submit 0, read the number and resubmit; 1.3 and 2.4 already
gave a hint only). Each wrong prediction below fails, and its message holds no form of the truth."""

from __future__ import annotations

import pytest
import torch

from utils.course.checks import ch03, ch04, warmup


@pytest.fixture(autouse=True)
def _lenient(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")  # failing verdicts are what these tests want


def _right_storage(fn, x):
    y = fn(x)
    return 0 if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() else y.untyped_storage().nbytes()


def test_exercise_0_4_withholds_the_measured_bytes():
    truth = warmup.predict_target(torch.zeros(*warmup.PREDICT_SHAPE)).untyped_storage().nbytes()
    verdict = warmup.check_new_storage_bytes(1, "a view, then a copy, then a cast to two bytes", _right_storage)
    assert verdict.status == "failed"
    assert f"{truth:,}" not in verdict.message and str(truth) not in verdict.message, verdict.message


def test_exercise_3_1_withholds_k_and_the_lost_fraction():
    k, lost = ch03.reference_prediction(ch03.LLAMA8B_PARAMS, ch03.PREDICT_MEAN, ch03.PREDICT_SD)
    words = "eight billion gradients, a normal tail of log2 magnitudes, overflow above 65504 and zero below 2^-25"
    wrong_k = ch03.check_flushed((k - 3, lost), words, lambda *a: 0.0)
    assert wrong_k.status == "failed" and f"k = {k}" not in wrong_k.message, wrong_k.message
    wrong_lost = ch03.check_flushed((k, min(1.0, lost * 10)), words, lambda *a: 0.0)
    assert wrong_lost.status == "failed" and f"{lost:.3g}" not in wrong_lost.message, wrong_lost.message


def test_exercise_4_2_withholds_the_gib():
    truths = ch04.backward_peak_truth()
    words = "parameters times bytes per parameter: weights, gradients, 8-bit states and their scales, a Kahan buffer"
    verdict = ch04.check_bytes_per_param(dict.fromkeys(truths, 1.0), words, lambda *a: 0.0)
    assert verdict.status == "failed"
    assert not any(f"{t:.1f}" in verdict.message for t in truths.values()), verdict.message
