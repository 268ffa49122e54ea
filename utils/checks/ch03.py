"""Checks for lab 03 (loss scaling)."""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from utils.checks.core import CheckFailed, Verdict, run_check


def check_dynamic_scaler(scaler_class: type) -> Verdict:
    """Exercise 3.1: the learner's scaler against torch.amp.GradScaler on a hidden overflow schedule.

    Each step: gradients are set (some with an inf), then `found_inf = scaler.unscale_(params)` and
    `scaler.update(found_inf)`; the scales, the found_inf flags and the unscaled gradients must match.
    """

    def body() -> None:
        rng = random.Random(3)
        interval = 4
        overflow_at = {s for s in range(40) if rng.random() < 0.2}
        reference = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=interval)
        ours: Any = scaler_class(init_scale=2.0**12, growth_factor=2.0, backoff_factor=0.5, growth_interval=interval)
        p_ref = torch.nn.Parameter(torch.zeros(5))
        p_our = torch.nn.Parameter(torch.zeros(5))
        opt = torch.optim.SGD([p_ref], lr=0.0)
        for step in range(40):
            raw = torch.randn(5)
            if step in overflow_at:
                raw[rng.randrange(5)] = math.inf
            expected_scale = reference.get_scale()
            if float(ours.scale_value) != expected_scale:
                raise CheckFailed(f"scale {expected_scale:g} before step {step}", f"{float(ours.scale_value):g}",
                                  "back off by backoff_factor on an overflow (and reset the count of clean steps); "
                                  "grow by growth_factor after growth_interval clean steps in a row.")
            scaled = ours.scale(torch.tensor(1.0))
            if float(scaled) != expected_scale:
                raise CheckFailed(f"scale(loss=1.0) = {expected_scale:g}", f"{float(scaled):g}", "multiply the loss.")
            reference.scale(torch.tensor(1.0))  # GradScaler initialises its scale lazily, here
            p_ref.grad = raw * expected_scale
            p_our.grad = raw * expected_scale
            reference.unscale_(opt)
            found_ref = not bool(torch.isfinite(p_ref.grad).all())
            found_our = ours.unscale_([p_our])
            if bool(found_our) != found_ref:
                raise CheckFailed(f"unscale_ returning {found_ref} at step {step}", repr(found_our),
                                  "return True when any gradient is inf or NaN after unscaling.")
            finite = torch.isfinite(p_ref.grad)
            if not torch.equal(p_our.grad[finite], p_ref.grad[finite]):
                raise CheckFailed("the gradients divided by the scale", "different gradients",
                                  "multiply each .grad in place by 1 / scale.")
            reference.step(opt)
            reference.update()
            ours.update(found_our)

    return run_check("3.1", body)
