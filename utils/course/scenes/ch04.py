"""Scenes of lab 04's checks (automatic mixed precision): what the learner's FP16 training step does to a small GPT's
parameters and to its GradScaler, step by step (utils.course.scenes explains the split)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from utils.lessons.models import GPT, GPTConfig, gpt_batch


# 4.3 ------------------------------------------------------------------------------------------------------------
def two_optimizers(model: torch.nn.Module) -> list[torch.optim.Optimizer]:
    """AdamW for the body, SGD with momentum for the LM head (as the colleague's script builds them)."""
    head = [p for n, p in model.named_parameters() if n.startswith("head.")]
    body = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    return [torch.optim.AdamW(body, lr=1e-2), torch.optim.SGD(head, lr=0.1, momentum=0.9)]


def clipped_step_scene(train_step: Callable[..., Any], d_model: int, n_micro: int, max_norm: float,
                       init_scale: float, seed: int, steps: int) -> dict[str, Any]:
    """`steps` calls of `train_step(model, optimizers, scaler, micro_batches, max_norm)` on a one-layer GPT with two
    optimizers and a GradScaler. Returns, for each step, what it returned (as a float where it is one, else None,
    and its repr) and the parameters after it; and the scaler's scale at the end."""
    cfg = GPTConfig(n_layer=1, d_model=d_model, n_head=4, seq_len=16, vocab_size=64)
    torch.manual_seed(seed)
    model = GPT(cfg)
    micro = [gpt_batch(cfg, 2, seed=seed * 100 + i) for i in range(n_micro)]
    optimizers = two_optimizers(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=2)
    losses, returned, params = [], [], []
    for _ in range(steps):
        got = train_step(model, optimizers, scaler, micro, max_norm)
        losses.append(float(got) if isinstance(got, float) else None)
        returned.append(repr(got))
        params.append({name: p.detach().clone() for name, p in model.named_parameters()})
    return {"losses": losses, "returned": returned, "params": params, "scale": float(scaler.get_scale())}
