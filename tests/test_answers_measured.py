"""The measured figures a chapter's folded answers quote are measured again here, at the sizes the answers name, and
must appear in the answer text (review s14 R15: a reader cannot tell a measured figure from a typed one, and a
typed one drifts as the code moves). Chapter 00, exercises 1-3: on the CPU, at the quick size (chapter 01's answer
1(c) is held by tests/test_ch01_lesson.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from utils.lessons.experiment_sizes.ch01 import STEP_BATCH, gpt_config
from utils.lessons.measure import saved_activation_bytes, step_peak_by_category
from utils.lessons.models import GPT, gpt_batch

ROOT = Path(__file__).resolve().parent.parent


def _answers(chapter: str) -> str:
    """The text of a chapter's folded answers (its `<details><summary>Answers` block), its whitespace runs as one
    space (the answers wrap their lines anywhere)."""
    nb = json.loads(next((ROOT / "notebooks").glob(f"{chapter}_*.ipynb")).read_text(encoding="utf-8"))
    text = next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "markdown" and "<summary>Answers</summary>" in "".join(c["source"]))
    return " ".join(text.split("<summary>Answers</summary>", 1)[1].split())


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
    answer = _answers("00")
    assert STEP_BATCH == 4 and cfg.seq_len == 64, "the answer names batch 4 -> 8 x 64 tokens"
    for name in ("Total", "Activation", "Temp", "Parameter", "Optstate"):
        assert f"{parts[name]:,} B" in answer, (name, parts[name])


def test_chapter_00_answers_2_and_3_are_the_measured_saved_bytes():
    """Exercise 2's SwiGLU MLP at batch 8, width 64; exercise 3's MLP with GELU and with ReLU at batch 32, width 64."""

    class SwiGLU(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.w1, self.w2, self.w3 = (nn.Linear(a, b, bias=False) for a, b in ((d, 4 * d), (4 * d, d), (d, 4 * d)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))

    def mlp(d: int, act: nn.Module) -> nn.Module:
        return nn.Sequential(nn.Linear(d, 4 * d), act, nn.Linear(4 * d, d))

    answer = _answers("00")
    swiglu = saved_activation_bytes(SwiGLU(64), torch.randn(8, 64))
    assert swiglu == 68 * 8 * 64 and f"{swiglu:,} B = 68 × 8 × 64" in answer
    gelu, relu = (saved_activation_bytes(mlp(64, act), torch.randn(32, 64)) for act in (nn.GELU(), nn.ReLU()))
    assert (gelu, relu) == (36 * 32 * 64, 20 * 32 * 64)
    assert f"{gelu:,} B with GELU, {relu:,} B with ReLU" in answer

