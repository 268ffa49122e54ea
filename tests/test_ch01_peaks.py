"""Chapter 01's readings about the step's peak, checked on small models: the loss's backward peaks at 12·n·V
bytes (FP32 log-probabilities, their dense FP32 gradient and the gradient of the log-softmax's input), the step's
peak moves from the optimizer step (few tokens) to backward's start (many tokens), and the analytic peak that
judges C04 agrees with the traced estimator."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.test_ch01_lesson import lesson
from utils.ledger.gpt import shape_of, transformer_memory
from utils.lessons.estimate import estimate_memory
from utils.lessons.measure import make_mem_tracker, peak_by_category, step_peak_by_category
from utils.lessons.models import GPT, GPTConfig, gpt_batch

CFG = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize(("n", "vocab"), [(256, 256), (96, 1000)])
def test_the_loss_backward_peaks_at_12_n_v(autocast, n, vocab):
    z = torch.randn(n, vocab, dtype=torch.bfloat16 if autocast else torch.float32, requires_grad=True)
    y = torch.randint(0, vocab, (n,))
    tracker = make_mem_tracker()
    with tracker:
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(z.float(), y)
        loss.backward()
    peak = peak_by_category(tracker)["Total"]
    assert 12 * n * vocab <= peak <= 12 * n * vocab + 64, peak / (n * vocab)


def _moment(model, opt, rows, tokens):
    x, y = gpt_batch(CFG, rows)
    x, y = x[:, :tokens].contiguous(), y[:, :tokens].contiguous()

    def step():
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    by_category = step_peak_by_category(step, model, opt)
    n_params = sum(p.numel() for p in model.parameters())
    return "optimizer step" if by_category["Gradient"] == 4 * n_params else "backward"


def test_the_peak_moves_from_the_optimizer_step_to_backward_with_more_tokens():
    torch.manual_seed(0)
    model = GPT(CFG)
    opt = torch.optim.AdamW(model.parameters())
    assert _moment(model, opt, 1, 8) == "optimizer step"
    assert _moment(model, opt, 4, 64) == "backward"


@pytest.mark.parametrize("batch", [4, 16])
def test_the_analytic_peak_of_c04_agrees_with_the_traced_estimator(batch):
    ns = lesson("overhead_at")
    ns["transformer_memory"] = transformer_memory
    shape = shape_of(CFG)
    e = transformer_memory(shape, batch)
    state = e.params + e.grads + e.optimizer_states
    analytic = (1 + ns["overhead_at"](shape, batch)) * state
    x, y = gpt_batch(CFG, batch)
    traced = estimate_memory(GPT(CFG), (x.contiguous(), y.contiguous())).total
    assert abs(analytic - traced) / traced < 0.01


def test_c04_overhead_grows_with_the_batch_on_a_real_size():
    ns = lesson("overhead_at")
    ns["transformer_memory"] = transformer_memory
    from utils.lessons.experiment_sizes.ch01 import gpt_config

    gpt2 = shape_of(gpt_config("full"))
    overheads = [ns["overhead_at"](gpt2, b) for b in (1, 4, 8)]
    assert overheads == sorted(overheads) and 0.2 <= overheads[0] <= 0.3 and overheads[2] > 1
