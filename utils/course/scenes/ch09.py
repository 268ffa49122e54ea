"""Scenes of lab 09's checks (capstone): what the learner's fine-tuning script and chunked loss do, measured where
they run: the live-tensor peak of their work, the values they return, the gradients their loss gives
(utils.course.scenes explains the split)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from utils.course.scenes.live_peak import LivePeak


# 9.3 -------------------------------------------------------------------------------------------------------------
class TinyLM(nn.Module):
    """The fine-tuned model of 9.3: an embedding, one hidden layer and an untied head over a large vocabulary."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.body = nn.Linear(d_model, d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(self.embed(tokens))))


Batches = list[tuple[torch.Tensor, torch.Tensor]]


def finetune_setup(vocab_size: int, d_model: int, n_train: int, n_eval: int,
                   seed: int) -> tuple[TinyLM, torch.optim.Optimizer, Batches, Batches]:
    """A TinyLM, its AdamW, and n_train + n_eval batches of 8 sequences of 32 tokens, from `seed`."""
    torch.manual_seed(seed)
    model = TinyLM(vocab_size, d_model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed + 1)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randint(0, vocab_size, (8, 32), generator=gen),
                torch.randint(0, vocab_size, (8, 32), generator=gen))

    return model, opt, [batch() for _ in range(n_train)], [batch() for _ in range(n_eval)]


def finetune_scene(finetune: Callable[..., Any], vocab_size: int, d_model: int, n_train: int, n_eval: int,
                   seed: int) -> dict[str, Any]:
    """`finetune(model, opt, train, evals)` on finetune_setup's model and batches, its live-tensor peak measured
    (LivePeak, in this thread, around the call only): the peak, and what the script returned: "returned" is its
    repr when it is not a triple, "types" the type names of its numbers when they are not all floats; else the
    losses, accuracies and evaluation loss as plain floats."""
    model, opt, train, evals = finetune_setup(vocab_size, d_model, n_train, n_eval, seed)
    with LivePeak() as live:
        result = finetune(model, opt, train, evals)
    seen: dict[str, Any] = {"peak": live.peak, "returned": None, "types": None}
    if not isinstance(result, tuple) or len(result) != 3:
        return {**seen, "returned": repr(result)[:80]}
    losses, accs, eval_loss = result
    numbers = [*losses, *accs, eval_loss] if isinstance(losses, list) and isinstance(accs, list) else [None]
    if not all(isinstance(v, float) for v in numbers):
        return {**seen, "types": sorted({type(v).__name__ for v in numbers})}
    return {**seen, "losses": [float(v) for v in losses], "accs": [float(v) for v in accs],
            "eval_loss": float(eval_loss)}


# 9.5 -------------------------------------------------------------------------------------------------------------
def chunk_case(tokens: int, d_model: int, vocab_size: int, pad_every: int,
               seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states (tokens, d), an untied head's weight (V, d) and targets with every `pad_every`-th token
    -100 (padding; 0: none)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d_model, generator=gen)
    weight = torch.randn(vocab_size, d_model, generator=gen) * d_model ** -0.5
    targets = torch.randint(0, vocab_size, (tokens,), generator=gen)
    if pad_every:
        targets[::pad_every] = -100
    return hidden, weight, targets


def chunked_loss_scene(chunked_loss: Callable[..., torch.Tensor], tokens: int, d_model: int, vocab_size: int,
                       chunk: int, pad_every: int, seed: int) -> dict[str, Any]:
    """`chunked_loss(hidden, weight, targets, chunk)` on chunk_case's tensors (hidden and weight as leaves that
    require grad), then backward through the returned loss, both under one LivePeak (in this thread): the loss, the
    two gradients, the peak and the bytes of the two inputs. "returned" is the repr of what came back when it is
    not a scalar tensor with a graph (then nothing runs backward)."""
    hidden, weight, targets = chunk_case(tokens, d_model, vocab_size, pad_every, seed)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with LivePeak() as live:
        got = chunked_loss(h, w, targets, chunk)
        if not isinstance(got, torch.Tensor) or got.dim() != 0 or not got.requires_grad:
            return {"returned": repr(got)[:80]}
        got.backward()
    return {"returned": None, "loss": got.detach(), "grads": {"hidden": h.grad, "weight": w.grad},
            "peak": live.peak, "input_bytes": hidden.nbytes + weight.nbytes}
