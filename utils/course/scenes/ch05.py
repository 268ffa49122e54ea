"""Scenes of lab 05's checks (gradient checkpointing): what the learner's checkpointed code does to a block's
gradients, statistics and saved bytes (utils.course.scenes explains the split)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from utils.lessons.measure import saved_activation_bytes


class MLPBlock(nn.Module):
    """The chapter's residual block with a configurable hidden width: saves about (2 + 2*mult) inputs' worth."""

    def __init__(self, d: int, mult: int = 4, dropout: float = 0.0, batchnorm: bool = False):
        super().__init__()
        self.norm = nn.BatchNorm1d(d) if batchnorm else nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, mult * d), nn.Linear(mult * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.down(self.drop(torch.nn.functional.gelu(self.up(self.norm(x)))))


def make_stack(n: int, d: int, mult: int = 4, seed: int = 0, **kwargs) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*(MLPBlock(d, mult, **kwargs) for _ in range(n)))


def fixed_checkpoint_scene(checkpointed_forward: Callable, tokens: int, d: int, p: float, seed: int) -> dict[str, Any]:
    """One training step of a block with dropout and BatchNorm through `checkpointed_forward(block, x)`: the
    parameters' gradients, BatchNorm's running statistics and batch count after it, and the bytes a second call
    saves for backward."""
    torch.manual_seed(seed)
    block = MLPBlock(d, 4, dropout=p, batchnorm=True).train()
    x = torch.randn(tokens, d)
    torch.manual_seed(seed + 100)
    out = checkpointed_forward(block, x)
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return {"output": repr(getattr(out, "shape", type(out).__name__))}
    out.pow(2).sum().backward()
    return {"output": "ok", "input_bytes": x.nbytes,
            "grads": {name: q.grad for name, q in block.named_parameters()},
            "running_mean": block.norm.running_mean.clone(), "running_var": block.norm.running_var.clone(),
            "num_batches_tracked": int(block.norm.num_batches_tracked),
            "saved": saved_activation_bytes(checkpointed_forward, block, x)}
