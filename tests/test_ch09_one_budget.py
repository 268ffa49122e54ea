"""Issue 25, error 3: chapter 01's will_it_fit and chapter 09's planner read one ledger and one budget."""

from dataclasses import replace

from utils.ledger.budget import GIB, REPORTED_GIB, gpu_budget, reported_bytes, usable_budget
from utils.ledger.gpt import PRESETS
from utils.ledger.plan import GPU_USABLE_BYTES, Choice, Plan, memory_of, will_it_fit


def test_issue_setup_same_answer_in_both_chapters():
    """1.3B, T = 1,024, batch 1, bf16-mixed + checkpointing on an A10G: the same bytes, budget and verdict."""
    report = will_it_fit("1.3B", 1, 1024, precision="bf16-mixed", checkpointing=True, gpu="A10G")
    shape = replace(PRESETS["1.3B"], seq_len=1024)
    choice = Choice(precision="bf16-mixed", checkpointing=True, micro_batch=1)
    ledger = memory_of(shape, choice)
    planned = Plan(choice, ledger, gpu_budget("A10G (24 GB)"))
    assert report.parts == ledger
    assert report.estimate.total == planned.total == sum(ledger.values())
    assert report.capacity == planned.budget == usable_budget(int(22.5 * GIB))
    assert report.fits == planned.fits
    e = report.estimate
    assert e.params + e.grads + e.optimizer_states + e.activations + e.optimizer_temporaries == e.total


def test_one_reported_figure_per_gpu():
    """An A10G reports 22.5 GiB in both chapters (the old chapter 01 figure was 22.0)."""
    assert reported_bytes("A10G") == reported_bytes("A10G (24 GB)") == int(REPORTED_GIB["A10G (24 GB)"] * GIB)
    for name, budget in GPU_USABLE_BYTES.items():
        assert budget == gpu_budget(name) == usable_budget(reported_bytes(name))


def test_will_it_fit_sgd_in_the_ledger():
    adamw = will_it_fit("163M", 1, 256, optimizer="adamw", gpu="T4")
    sgd = will_it_fit("163M", 1, 256, optimizer="sgd", gpu="T4")
    momentum = will_it_fit("163M", 1, 256, optimizer="sgd-momentum", gpu="T4")
    n = replace(PRESETS["163M"], seq_len=256).n_params
    assert sgd.estimate.optimizer_states == 0
    tensors = 2 + 12 * 12 + 2 + 1  # AdamW's 4-byte step counter per tensor
    assert momentum.estimate.optimizer_states == 4 * n and adamw.estimate.optimizer_states == 8 * n + 4 * tensors
