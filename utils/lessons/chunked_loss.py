"""Chunked linear-cross-entropy: the loss of a language model's head without keeping its logits.

A plain head computes logits = hidden @ W^T for every token (tokens x vocabulary) and the loss's log-softmax saves
them in FP32 for backward: for Llama-3-8B at 8,192 tokens that is 8,192 x 128,256 x 4 B = 3.9 GiB, and backward
adds a gradient as large. Computing the head and the loss `chunk_tokens` tokens at a time, each chunk under
activation checkpointing, keeps only the hidden states (already alive) and recomputes one chunk's logits in
backward: the logits' memory falls from tokens x V to chunk_tokens x V. (Liger-Kernel's and Apple's fused
kernels do the same in one kernel: https://github.com/linkedin/Liger-Kernel, https://arxiv.org/abs/2411.09009.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from utils.validate import check_int


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = (hidden @ weight.t()).float()
    return F.cross_entropy(logits, targets, reduction="sum", ignore_index=-100)


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          chunk_tokens: int = 1024) -> torch.Tensor:
    """Mean cross-entropy of `hidden @ weight.T` against `targets` (-100 ignored), `chunk_tokens` tokens at a time;
    `hidden` is (..., d), `weight` (V, d), `targets` the leading shape of `hidden`. Same value and gradients as
    `F.cross_entropy(hidden @ weight.T, targets)`."""
    for name, t in (("hidden", hidden), ("weight", weight), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    check_int("chunk_tokens", chunk_tokens, minimum=1)
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"weight must be (vocabulary, {hidden.shape[-1]}), got {tuple(weight.shape)}")
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"targets must have shape {tuple(hidden.shape[:-1])}, got {tuple(targets.shape)}")
    flat, labels = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, flat.shape[0], chunk_tokens):
        end = start + chunk_tokens
        total = total + checkpoint(_chunk_loss, flat[start:end], weight, labels[start:end], use_reentrant=False)
    return total / (labels != -100).sum().clamp(min=1)


def logits_saved_bytes(tokens: int, vocab_size: int, chunk_tokens: int | None = None) -> int:
    """FP32 logits bytes the loss keeps for backward (None: a plain head, all tokens; else one chunk's, recomputed
    in backward)."""
    check_int("tokens", tokens, minimum=1)
    check_int("vocab_size", vocab_size, minimum=1)
    if chunk_tokens is not None:
        check_int("chunk_tokens", chunk_tokens, minimum=1)
        tokens = min(tokens, chunk_tokens)
    return 4 * tokens * vocab_size
