"""The measured figures a chapter's folded answers quote are measured again here, at the sizes the answers name, and
must appear in the answer text (review s14 R15: a reader cannot tell a measured figure from a typed one, and a
typed one drifts as the code moves). Chapter 00, exercises 1 and 3: on the CPU, at the quick size (exercise 2's
gated MLP is held by tests/test_issue35_chapters.py, chapter 01's answer 1(c) by tests/test_ch01_lesson.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from notebook_lessons import folded_answer
from torch import nn

from utils.lessons.experiment_sizes.ch01 import STEP_BATCH, gpt_config
from utils.lessons.measure import saved_activation_bytes, step_peak_by_category
from utils.lessons.models import GPT, gpt_batch

CHAPTER_00 = Path(__file__).resolve().parent.parent / "notebooks" / "00_setup_and_environment.ipynb"


def _answer(start: str) -> str:
    """The folded answer of chapter 00's exercise whose question contains `start`, its whitespace runs as one space
    (the answers wrap their lines anywhere)."""
    return " ".join(folded_answer(CHAPTER_00, start).split())


@pytest.fixture(autouse=True)
def _quick(monkeypatch):
    monkeypatch.setenv("COURSE_SIZE", "quick")


def test_chapter_00_answer_1_is_the_measured_step_at_twice_the_batch():
    """Section 2's step with `2 * STEP_BATCH`, by MemTracker's categories, as the answer says."""
    torch.manual_seed(0)
    cfg = gpt_config()
    model = GPT(cfg)
    x, y = (t.contiguous() for t in gpt_batch(cfg, 2 * STEP_BATCH))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step():
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    parts = step_peak_by_category(train_step, model, opt)
    answer = _answer("In section 2's step cell")
    assert STEP_BATCH == 4 and cfg.seq_len == 64, "the answer names batch 4 -> 8 x 64 tokens"
    for name in ("Total", "Activation", "Temp", "Parameter", "Optstate"):
        assert f"{parts[name]:,} B" in answer, (name, parts[name])


def test_chapter_00_answer_3_is_the_measured_saved_bytes():
    """Exercise 3's MLP with GELU and with ReLU at batch 32, width 64."""

    def mlp(d: int, act: nn.Module) -> nn.Module:
        return nn.Sequential(nn.Linear(d, 4 * d), act, nn.Linear(4 * d, d))

    answer = _answer("Replace `nn.GELU()`")
    gelu, relu = (saved_activation_bytes(mlp(64, act), torch.randn(32, 64)) for act in (nn.GELU(), nn.ReLU()))
    assert (gelu, relu) == (36 * 32 * 64, 20 * 32 * 64)
    assert f"{gelu:,} B with GELU, {relu:,} B with ReLU" in answer
