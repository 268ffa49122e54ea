"""Small models built from configs (no downloads): a GPT-style transformer, an MLP and a CNN.

The GPT's attention is either "eager" (softmax(QK^T)V written out, which saves the T x T attention
matrix) or "sdpa" (`scaled_dot_product_attention`, which does not), so chapters can measure the
difference. `checkpointing=True` wraps each block in `torch.utils.checkpoint.checkpoint`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from utils.validate import check_device, check_int

ATTENTIONS = ("eager", "sdpa")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    dropout: float = 0.0
    attention: str = "sdpa"
    checkpointing: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if not isinstance(self.dropout, int | float) or isinstance(self.dropout, bool):
            raise TypeError(f"dropout must be a number in [0, 1), got {type(self.dropout).__name__}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.checkpointing, bool):
            raise TypeError(f"checkpointing must be a bool, got {type(self.checkpointing).__name__}")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.attention, self.dropout = cfg.n_head, cfg.attention, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            weights = F.dropout(weights, self.dropout, self.training)
            y = weights @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A decoder-only transformer: token and position embeddings, blocks, final LayerNorm, LM head."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab), or the mean cross-entropy loss when `targets` are given."""
        t = idx.size(1)
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence length {t} exceeds the model's seq_len {self.cfg.seq_len}")
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.cfg.checkpointing else block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def gpt_batch(cfg: GPTConfig, batch: int, *, device: torch.device | str = "cpu", seed: int = 0
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch of token ids and next-token targets for `cfg` (a learnable pattern)."""
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    check_int("seed", seed, minimum=0)
    check_device("device", device)
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g)
    step = torch.randint(1, 4, (batch, 1), generator=g)
    seq = (start + step * torch.arange(cfg.seq_len + 1)) % cfg.vocab_size  # arithmetic sequences
    return seq[:, :-1].to(device), seq[:, 1:].to(device)


def mlp(d_in: int = 64, hidden: int = 256, d_out: int = 10, depth: int = 2) -> nn.Sequential:
    """Linear + GELU layers: `depth` hidden layers of width `hidden`."""
    for name, value in (("d_in", d_in), ("hidden", hidden), ("d_out", d_out), ("depth", depth)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    layers: list[nn.Module] = []
    width = d_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.GELU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, d_out))


def cnn(channels: int = 16, n_classes: int = 10, image: int = 16) -> nn.Sequential:
    """Two conv-BatchNorm-ReLU stages, pooling and a linear classifier, for `image` x `image` RGB inputs."""
    for name, value in (("channels", channels), ("n_classes", n_classes), ("image", image)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.BatchNorm2d(2 * channels), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, n_classes))
