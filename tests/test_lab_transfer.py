"""Issue 34: the exercises that re-typed their chapter (0.1, 0.2, 1.1-1.4, 5.1, 7.1, 7.4, 9.4) now ask for a
transfer. Here: what each new check compares with is a measurement, not itself (0.1's packing formula against
torch's packed dtypes, 0.2's against the archive torch.save writes), and the answers that carry the chapter over
unchanged fail (9.4's evaluation sized as if no_grad freed everything). The per-lab tests (test_ch01_checks,
test_ch05_sizes_and_checks, test_ch07_checks, test_check_gaming) hold the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from utils.course.checks import ch09, warmup

ROOT = Path(__file__).resolve().parent.parent


def _solution(lab: str, *cells: int) -> dict:
    nb = json.loads((ROOT / "solutions" / lab).read_text())
    namespace: dict = {}
    for i in cells:
        exec("".join(nb["cells"][i]["source"]), namespace)  # noqa: S102
    return namespace


@pytest.mark.parametrize("shape", [(4, 6), (3, 8), (2, 2, 10), (1, 2)])
def test_packed_bytes_truth_is_torchs_packed_fp4(shape):
    packed = torch.zeros(*shape[:-1], shape[-1] // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert packed.nbytes == warmup.packed_truth(shape, 4)
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.float64):
        bits = torch.finfo(dtype).bits
        assert torch.zeros(*shape, dtype=dtype).nbytes == warmup.packed_truth(shape, bits)
    assert warmup.packed_truth((), 32) == 4 and warmup.packed_truth((3, 5), 4) == 9  # a padded row


def test_saved_state_bytes_is_what_torch_save_writes(monkeypatch):
    """0.2: the truth is read from torch.save's archive; a tied weight is one record, a slice writes its whole
    storage; the chapter-style count (elements x element size per entry) fails."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    emb, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    assert warmup.written_bytes(nn.ModuleDict({"e": emb, "h": head}).state_dict()) == 10 * 4 * 4
    assert warmup.written_bytes({"rows": torch.zeros(100, 8)[:2]}) == 100 * 8 * 4
    elements = lambda state: sum(t.numel() * t.element_size() for t in state.values())  # noqa: E731
    assert warmup.check_saved_state_bytes(elements).status == "failed"


def test_the_evaluation_batch_must_count_the_resident_states(monkeypatch):
    """9.4: the solution's plan passes; an evaluation batch sized as if only the logits counted (no resident
    weights and optimizer state), or as the training micro-batch, fails."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    ns = _solution("lab09_capstone_fit_a_model.ipynb", 1, 12)
    right = ns["make_plan"](ch09.LAB_CONFIG, ch09.LAB_BUDGET, ch09.LAB_EFFECTIVE_BATCH)
    choice, eval_batch = right
    at_answer, one, two = ch09.eval_peaks(ch09.LAB_CONFIG, choice, [eval_batch, 1, 2])
    assert at_answer <= ch09.LAB_BUDGET
    per_sequence = two - one
    states_forgotten = min(64, ch09.LAB_BUDGET // per_sequence)
    assert states_forgotten > eval_batch
    assert ch09.check_plan(lambda *a: (choice, states_forgotten)).status == "failed"
    assert ch09.check_plan(lambda *a: (choice, choice.micro_batch)).status == "failed"
