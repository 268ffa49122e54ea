"""Checks for lab 04 (automatic mixed precision)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from utils.checks.core import CheckFailed, Verdict, run_check
from utils.models import GPT, GPTConfig, gpt_batch


def _reference_step(model, optimizer, scaler, x, y, max_norm) -> float:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def check_amp_step(amp_step: Callable[..., float]) -> Verdict:
    """Exercise 4.1: after 6 FP16 steps with clipping, parameters and the scaler's scale match the reference."""

    def body() -> None:
        cfg = GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=16, vocab_size=64)
        torch.manual_seed(0)
        ref_model = GPT(cfg)
        your_model = copy.deepcopy(ref_model)
        x, y = gpt_batch(cfg, 4)
        pairs = []
        for model in (ref_model, your_model):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            pairs.append((model, opt, torch.amp.GradScaler("cpu", init_scale=2.0**14, growth_interval=2)))
        for step in range(6):
            ref_loss = _reference_step(*pairs[0], x, y, 0.5)
            your_loss = amp_step(*pairs[1], x, y, 0.5)
            if not isinstance(your_loss, float) or abs(your_loss - ref_loss) > 1e-3 * abs(ref_loss):
                raise CheckFailed(f"the loss {ref_loss:.5f} returned (a float) at step {step}", repr(your_loss),
                                  "compute the loss under torch.autocast('cpu', dtype=torch.float16) and return "
                                  "loss.item()")
        if pairs[1][2].get_scale() != pairs[0][2].get_scale():
            raise CheckFailed(f"the scaler's scale {pairs[0][2].get_scale():g} after 6 steps",
                              f"{pairs[1][2].get_scale():g}", "call scaler.update() once per step.")
        for (name, p_ref), p_you in zip(ref_model.named_parameters(), your_model.parameters(), strict=True):
            if p_you.grad is not None:
                raise CheckFailed("gradients cleared after each step", f"a gradient left on {name}",
                                  "call optimizer.zero_grad(set_to_none=True) at the end of the step.")
            if not torch.allclose(p_ref, p_you, rtol=1e-3, atol=1e-5):
                raise CheckFailed(f"parameter {name} as the reference after 6 steps",
                                  f"a max difference of {(p_ref - p_you).abs().max().item():.3g}",
                                  "unscale the gradients (scaler.unscale_) before clip_grad_norm_, then scaler.step.")

    return run_check("4.1", body)
