"""Issue 33: chapter 01's estimate of a step on an Apple GPU. Training on MPS runs SDPA's math kernel (the MPS
kernel runs only without gradients: aten/src/ATen/native/transformers/attention.cpp, v2.13.0), which keeps the
attention probabilities; the estimator traced the CPU's flash kernel and came out more than 1% under. Metered here
by the simulated Apple GPU's allocator (tests/simulated_gpu.py), not by the estimator's own trace."""

import pytest
import torch
from simulated_gpu import simulated

from utils.lessons.estimate import estimate_memory
from utils.lessons.measure import step_peak
from utils.lessons.models import GPT, GPTConfig, gpt_batch


@pytest.mark.parametrize("seq_len", [64, 128])
def test_an_apple_gpu_step_is_estimated_with_the_math_kernel(seq_len: int) -> None:
    cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=seq_len, vocab_size=256)
    with simulated("mps"):
        torch.manual_seed(0)
        model = GPT(cfg).to("mps")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = gpt_batch(cfg, 4, device="mps")

        def step() -> None:
            model(x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        measured = step_peak(step, model, opt)
        estimated = estimate_memory(model, (x, y), optimizer="adamw").total
    assert abs(estimated - measured) / measured < 0.01, (estimated, measured)
