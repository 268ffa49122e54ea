"""Scenes of lab 01's checks (where the memory goes): what the learner's training loop leaves alive when it returns
(utils.course.scenes explains the split)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from utils.lessons.models import GPT, GPTConfig, gpt_batch


# 1.5 -------------------------------------------------------------------------------------------------------------
def no_leak_scene(train_with_validation: Callable[..., Any], cfg: dict[str, Any], steps: int, seed: int
                  ) -> dict[str, Any]:
    """The learner's loop on a GPT of config `cfg` (GPTConfig's fields) under a saved-tensor hook that remembers
    (weakly) every activation saved: the losses it returns (their types, and their values as floats), and the
    bytes of saved activations still alive once the result is dropped."""
    config = GPTConfig(**cfg)
    torch.manual_seed(seed)
    model = GPT(config)
    train, val = gpt_batch(config, 4, seed=seed), gpt_batch(config, 4, seed=seed + 1)
    keep_out = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *train, *val]}
    saved: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in keep_out and not isinstance(t, nn.Parameter):
            saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = train_with_validation(model, train, val, steps)
    shaped = isinstance(result, tuple) and len(result) == 2
    kinds = [sorted({type(v).__name__ for v in got}) if isinstance(got, list) else type(got).__name__
             for got in result] if shaped else None
    values = [[float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in got]
              if isinstance(got, list) else None for got in result] if shaped else None
    kind = type(result).__name__
    del result
    gc.collect()
    alive = {id(t): t for t in (r() for r in saved) if t is not None}
    return {"type": kind, "kinds": kinds, "values": values,
            "alive_bytes": sum(t.untyped_storage().nbytes() for t in alive.values())}
