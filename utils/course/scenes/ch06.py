"""Scenes of lab 06's checks (gradient accumulation): what the learner's accumulation does to a model's gradients,
how many sequences each of its forwards runs, and what two optimizer steps leave in a model and a GradScaler
(utils.course.scenes explains the split)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from utils.lessons.quiet import install_filters


def tiny_llama(seed: int) -> nn.Module:
    """A tiny Hugging Face Llama built from a config (grouped-query attention: 4 query heads share 2 key/value heads;
    RMSNorm; SwiGLU; untied input and output embeddings), in FP32 on the CPU."""
    install_filters()  # transformers may import torchao, whose optional kernels print load failures on a CPU
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=96, tie_word_embeddings=False, max_position_embeddings=64)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def padded(n: int, seq_len: int, vocab: int, seed: int, empty_rows: int = 0) -> dict[str, torch.Tensor]:
    """A right-padded batch as a Hugging Face collator gives it: input_ids, attention_mask, and labels equal to the
    ids with -100 at padding (the model shifts them by one itself). The first `empty_rows` sequences are all padding
    (a micro-batch may hold no real target at all)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, seq_len), generator=g)
    lengths = torch.randint(1, seq_len + 1, (n,), generator=g)
    lengths[:empty_rows] = 0
    mask = (torch.arange(seq_len) < lengths[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


# 6.1 -------------------------------------------------------------------------------------------------------------
def token_setup(k: int, n: int, seed: int, empty: int) -> tuple[nn.Module, list[dict[str, torch.Tensor]]]:
    """Exercise 6.1's start: the tiny Llama of `seed` and a padded batch of `n` sequences of 12 (the first `empty`
    all padding) in `k` micro-batches (dicts of input_ids, attention_mask, labels)."""
    model = tiny_llama(seed)
    batch = padded(n, 12, model.config.vocab_size, seed, empty)
    return model, [dict(zip(batch, parts, strict=True))
                   for parts in zip(*(t.chunk(k) for t in batch.values()), strict=True)]


@contextlib.contextmanager
def counted_rows(module: nn.Module) -> Iterator[dict[str, Any]]:
    """The rows (the batch dimension of its first input) of each forward of `module`, seen three times: by a hook on
    the module, by a global module hook (torch.nn.modules.module.register_module_forward_hook) and by its forward
    method. A forward one of them did not see, or a counter gone by the end, is a counter taken off (review s15's
    red team, A3 and V3)."""
    seen: dict[str, Any] = {"rows": [], "global": [], "forward": [], "intact": False}
    local = module.register_forward_hook(lambda _m, args, _o: seen["rows"].append(int(args[0].shape[0])))
    everywhere = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, _o: seen["global"].append(int(args[0].shape[0])) if m is module else None)
    forward = module.forward  # a third count: `module.forward(x)` skips the hooks, not this (red team s15, V3)

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen["forward"].append(int(args[0].shape[0]))
        return forward(*args, **kwargs)

    module.forward = counted
    try:
        yield seen
    finally:
        seen["intact"] = (local.id in module._forward_hooks
                          and everywhere.id in torch.nn.modules.module._global_forward_hooks
                          and module.__dict__.get("forward") is counted
                          and seen["rows"] == seen["global"] == seen["forward"])
        del module.forward
        local.remove()
        everywhere.remove()


def token_normalised_scene(accumulate: Callable, k: int, n: int, seed: int, empty: int) -> dict[str, Any]:
    """`accumulate(model, micro_batches)` on exercise 6.1's start: the largest micro-batch (counted before the
    call), the number of sequences each forward of the model runs, and each parameter's .grad afterwards."""
    model, micro_batches = token_setup(k, n, seed, empty)
    largest = max(len(mb["input_ids"]) for mb in micro_batches)
    with counted_rows(model.get_input_embeddings()) as seen:
        accumulate(model, micro_batches)
    names, grads = zip(*((name, p.grad) for name, p in model.named_parameters()), strict=True)
    return {"largest": largest, "rows": seen["rows"], "counted": seen["intact"], "names": list(names),
            "grads": list(grads)}


# 6.3 -------------------------------------------------------------------------------------------------------------
class TinyMoE(nn.Module):
    """A top-1 mixture-of-experts layer and a head: forward returns (output, Switch-Transformer load-balancing
    loss E * sum_e f_e * P_e, f_e the share of tokens routed to expert e, P_e its mean router probability)."""

    def __init__(self, d: int = 16, experts: int = 4, hidden: int = 32, out: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
                                     for _ in range(experts))
        self.head = nn.Linear(d, out)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = self.router(x).float().softmax(-1)
        top = probs.argmax(-1)
        mixed = sum((top == e).unsqueeze(-1) * probs[:, e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        chosen = F.one_hot(top, len(self.experts)).float()
        aux = len(self.experts) * (chosen.mean(0) * probs.mean(0)).sum()
        return self.head(mixed), aux


def moe_optimizers(model: TinyMoE) -> list[torch.optim.Optimizer]:
    """The team's two optimizers: experts and head at lr 0.1, the router at its own lr 0.02."""
    rest = [p for name, p in model.named_parameters() if not name.startswith("router.")]
    return [torch.optim.SGD(rest, lr=0.1), torch.optim.SGD(model.router.parameters(), lr=0.02)]


def moe_scene(step: Callable, k: int, init_scale: float, max_norm: float, alpha: float, seed: int,
              poison: bool) -> dict[str, Any]:
    """Two optimizer steps `step(model, optimizers, scaler, micro_batches, max_norm, alpha)` of the TinyMoE of
    `seed` on 6k tokens in k micro-batches (one input an inf where `poison`): the router's, experts' and head's
    parameters after them (each part flattened), the scaler's scale, and whether any gradient is left."""
    torch.manual_seed(seed)
    model = TinyMoE()
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(6 * k, 16, generator=g) * 2, torch.randn(6 * k, 4, generator=g)
    if poison:
        x[-1, 0] = float("inf")
    micro = list(zip(x.chunk(k), y.chunk(k), strict=True))
    optimizers = moe_optimizers(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1)
    for _ in range(2):  # two optimizer steps: what the first leaves behind matters for the second
        step(model, optimizers, scaler, micro, max_norm, alpha)
    parts = {part: torch.cat([p.detach().flatten() for p in getattr(model, part).parameters()])
             for part in ("router", "experts", "head")}
    return {**parts, "scale": float(scaler.get_scale()),
            "grads_left": any(p.grad is not None for p in model.parameters())}


# 6.5 -------------------------------------------------------------------------------------------------------------
def weighted_setup(classes: int, n: int, seed: int, ignored: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor,
                                                                            torch.Tensor]:
    """A small image classifier (a CNN), a batch of n 1x8x8 images, labels (the first `ignored` set to -100) and
    class weights (an imbalanced dataset's inverse frequencies)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, classes))
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, classes, (n,), generator=g)
    y[:ignored] = -100
    weights = torch.rand(classes, generator=g) * 4 + 0.25
    return model, x, y, weights


def weighted_scene(accumulate_weighted: Callable, k: int, n: int, classes: int, seed: int,
                   ignored: int) -> dict[str, Any]:
    """`accumulate_weighted(model, micro_batches, weights)` on weighted_setup's CNN and batch in k micro-batches of
    (images, labels): each parameter's .grad afterwards (None where it has none), the largest micro-batch and the
    images each forward of the model ran."""
    model, x, y, weights = weighted_setup(classes, n, seed, ignored)
    micro_batches = list(zip(x.chunk(k), y.chunk(k), strict=True))
    with counted_rows(model[0]) as seen:
        accumulate_weighted(model, micro_batches, weights.clone())
    return {"grads": [p.grad for p in model.parameters()], "largest": max(len(mb[0]) for mb in micro_batches),
            "rows": seen["rows"], "counted": seen["intact"]}
