"""Hints name what is still wrong: lab 6.1's loop has two bugs, and after one is fixed the hint names the other."""

from __future__ import annotations

import pytest

from utils.course.checks.ch06 import check_token_normalised


def _loss(model, batch, num_items=None):
    """A Hugging Face causal LM's loss: the micro-batch's mean, or its sum over num_items targets."""
    return model(**batch, num_items_in_batch=num_items).loss if num_items else model(**batch).loss


def both_bugs(model, micro_batches) -> None:
    for batch in micro_batches:
        model.zero_grad()
        (_loss(model, batch) / len(micro_batches)).backward()


def clearing_fixed(model, micro_batches) -> None:
    for batch in micro_batches:
        (_loss(model, batch) / len(micro_batches)).backward()


def normalisation_fixed(model, micro_batches) -> None:
    total = sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro_batches)
    for batch in micro_batches:
        model.zero_grad()
        _loss(model, batch, total).backward()


@pytest.mark.parametrize(("answer", "names"), [(both_bugs, "cleared inside the loop"),
                                               (normalisation_fixed, "cleared inside the loop"),
                                               (clearing_fixed, "what is still wrong is the normalisation")])
def test_hint_names_the_remaining_bug(answer, names, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    verdict = check_token_normalised(answer)
    assert verdict.status == "failed" and names in verdict.message, verdict.message
    assert "two bugs" not in verdict.message
