"""Scenes of lab 03's checks (loss scaling): what the learner's scaler class does to a small model's scales and
weights, and what the learner's training loop does to a model, its optimizer, scheduler and GradScaler
(utils.course.scenes explains the split)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch


# 3.2 -------------------------------------------------------------------------------------------------------------
def scaler_scene(make_scaler: Any, steps: int, overflow_at: Sequence[int], clip_at: Sequence[int],
                 init_scale: float, interval: int, seed: int) -> dict[str, Any]:
    """Train a Linear for `steps` steps with the scaler class `make_scaler` (the learner's interface: scale_value,
    scale(loss), unscale_(params), step(opt, params), update()); gradients overflow at the steps in overflow_at, and
    at the steps in clip_at the loop unscales explicitly and clips before stepping. Returns the scale before each
    step and the final weights; where `make_scaler` is torch.amp.GradScaler or a subclass of it, only its name."""
    if isinstance(make_scaler, type) and issubclass(make_scaler, torch.amp.GradScaler):
        return {"gradscaler": make_scaler.__name__}
    overflow_at, clip_at = set(overflow_at), set(clip_at)
    torch.manual_seed(seed)
    model = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(seed + 1)
    x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
    scaler = make_scaler(init_scale=init_scale, growth_factor=2.0, backoff_factor=0.5, growth_interval=interval)
    scales = []
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        scales.append(float(scaler.scale_value))
        scaler.scale(loss).backward()
        if step in overflow_at:
            params[0].grad.view(-1)[step % params[0].numel()] = math.inf
        if step in clip_at:
            scaler.unscale_(params)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt, params)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return {"gradscaler": None, "scales": scales, "weights": torch.cat([p.detach().flatten() for p in params])}


# 3.4 -------------------------------------------------------------------------------------------------------------
def setup_loop(seed: int, lr_kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, list]:
    """A small MLP, SGD, a StepLR ("step") or LambdaLR ("lambda") schedule and 12 batches, from `seed`."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if lr_kind == "step":
        sched: Any = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    gen = torch.Generator().manual_seed(seed + 7)
    batches = [(torch.randn(8, 5, generator=gen), 3 * torch.randn(8, 1, generator=gen)) for _ in range(12)]
    return model, opt, sched, batches


class AskedScaler(torch.amp.GradScaler):
    """A GradScaler that counts the calls of get_scale() (each a host sync on a GPU) while `counting` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counting, self.asked = False, 0

    def get_scale(self) -> float:
        self.asked += self.counting
        return super().get_scale()


def loop_scene(train_loop: Callable, overflow_at: Sequence[int], lr_kind: str, seed: int, accum: int,
               max_norm: float) -> dict[str, Any]:
    """One run of `train_loop(model, opt, sched, scaler, batches, after_backward, accum, max_norm)` with a
    GradScaler, where the first parameter's gradient overflows after the backward of the batches in overflow_at.
    Returns what the loop returned (its repr, and as a list of bools where it is a list), the learning rate, the
    weights and the scale at the end, whether the scheduler warned that it stepped before the optimizer, and how
    many times the loop asked the scaler for its scale."""
    overflow_at = set(overflow_at)
    model, opt, sched, batches = setup_loop(seed, lr_kind)
    scaler = AskedScaler("cpu", init_scale=2.0**8, growth_interval=2)
    first = next(model.parameters())

    def after_backward(i: int) -> None:
        if i in overflow_at:
            first.grad.view(-1)[0] = math.inf

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler.counting = True
        stepped = train_loop(model, opt, sched, scaler, batches, after_backward, accum, max_norm)
        scaler.counting = False
    return {"asked": scaler.asked, "returned": repr(stepped),
            "steps": [bool(s) for s in stepped] if isinstance(stepped, list) else None,
            "lr": float(opt.param_groups[0]["lr"]),
            "weights": torch.cat([p.detach().flatten() for p in model.parameters()]),
            "warned": any("lr_scheduler.step()" in str(w.message) for w in caught),
            "scale": float(scaler.get_scale())}
