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


def fixed_checkpoint_scene(checkpointed_forward: Callable, tokens: int, d: int, p: float, seed: int,
                           evaluates: bool = False) -> dict[str, Any]:
    """One training step of a block with dropout and BatchNorm through `checkpointed_forward(block, x)`: the
    parameters' gradients, BatchNorm's running statistics and batch count after it, and the bytes a second call
    saves for backward. With `evaluates`, the step logs a validation loss between the forward and the backward, as
    a loop that calls block.train() only at the top of the next step does: block.eval(), a forward under no_grad,
    and the backward then runs with the block still in eval mode."""
    torch.manual_seed(seed)
    block = MLPBlock(d, 4, dropout=p, batchnorm=True).train()
    x = torch.randn(tokens, d)
    x_val = torch.randn(tokens, d)
    torch.manual_seed(seed + 100)
    out = checkpointed_forward(block, x)
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return {"output": repr(getattr(out, "shape", type(out).__name__))}
    if evaluates:
        block.eval()
        with torch.no_grad():
            block(x_val)
    try:
        out.pow(2).sum().backward()
    except Exception as exc:  # noqa: BLE001 (what the learner's recomputation raised is the outcome)
        return {"output": f"the backward raised {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"}
    block.train()
    return {"output": "ok", "input_bytes": x.nbytes,
            "grads": {name: q.grad for name, q in block.named_parameters()},
            "running_mean": block.norm.running_mean.clone(), "running_var": block.norm.running_var.clone(),
            "num_batches_tracked": int(block.norm.num_batches_tracked),
            "saved": saved_activation_bytes(checkpointed_forward, block, x)}


# 5.1 -------------------------------------------------------------------------------------------------------------
class CrossBlock(nn.Module):
    """A decoder block with cross-attention (T5's, Whisper's decoder): the queries come from x, the keys and values
    from the encoder's output `memory`, whose padded positions `pad_mask` (True = padding) are masked out; then an
    MLP. `pad_mask` is keyword-only, as many library blocks take their masks (the lab shows this class)."""

    def __init__(self, d: int, n_head: int = 2) -> None:
        super().__init__()
        self.n_head = n_head
        self.norm, self.q, self.kv, self.out = nn.LayerNorm(d), nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, *, pad_mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.q(self.norm(x)).view(b, t, self.n_head, -1).transpose(1, 2)
        k, v = (z.view(b, memory.shape[1], self.n_head, -1).transpose(1, 2) for z in self.kv(memory).chunk(2, -1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~pad_mask[:, None, None, :])
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x)


def make_decoder(n: int, d: int, seed: int) -> nn.ModuleList:
    torch.manual_seed(seed)
    return nn.ModuleList(CrossBlock(d) for _ in range(n))


def checkpointed_decoder_scene(checkpoint_decoder: Callable, n: int, b: int, t: int, s: int, d: int, trains: bool
                               ) -> dict[str, Any]:
    """A decoder of n CrossBlocks run by `checkpoint_decoder(blocks, x, memory, pad_mask)` (the first sequence's
    memory padded): the bytes a first call saves for backward, then a second call's output and, after the backward
    of its squared sum, the gradients of the parameters, of x and of the memory (None where there is none)."""
    blocks = make_decoder(n, d, seed=n + t + s)
    torch.manual_seed(d)
    x = torch.randn(b, t, d, requires_grad=True)
    memory = torch.randn(b, s, d, requires_grad=trains)
    pad_mask = torch.zeros(b, s, dtype=torch.bool)
    pad_mask[0, s // 2 + 1:] = True  # the first sequence is padded
    scene: dict[str, Any] = {"x_bytes": x.nbytes, "memory_bytes": memory.nbytes,
                             "saved": saved_activation_bytes(checkpoint_decoder, blocks, x, memory, pad_mask)}
    out = checkpoint_decoder(blocks, x, memory, pad_mask)
    if not isinstance(out, torch.Tensor) or out.shape != (b, t, d):
        return {**scene, "output": repr(getattr(out, "shape", out))}
    out.pow(2).sum().backward()
    return {**scene, "output": "ok", "grads": {name: q.grad for name, q in blocks.named_parameters()},
            "x_grad": x.grad, "memory_grad": memory.grad}


# 5.6 -------------------------------------------------------------------------------------------------------------
class DropPath(nn.Module):
    """Stochastic depth, as ViTs use it: in training, each sample's branch is dropped with probability p (and the
    kept ones scaled by 1/(1-p)). The colleague's version draws from its own `torch.Generator`, seeded per block,
    so that a run's drop-path decisions are reproducible whatever else uses torch's default generator."""

    def __init__(self, p: float, seed: int = 0) -> None:
        super().__init__()
        self.p = p
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], *([1] * (x.dim() - 1)), generator=self.generator) >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)


class ViTBlock(nn.Module):
    """A pre-norm ViT MLP block with stochastic depth: x + drop_path(fc2(gelu(fc1(norm(x)))))."""

    def __init__(self, d: int, drop_path: float, seed: int = 0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop_path = DropPath(drop_path, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)))))


class TinyViT(nn.Module):
    """Someone else's ViT fine-tuning setup: a FROZEN pretrained patch embedding (and fixed position table), then
    trainable blocks with stochastic depth (each block's DropPath draws from its own generator, seeded from
    `seed`), a final LayerNorm, mean pooling and a classification head."""

    def __init__(self, image: int = 16, patch: int = 4, channels: int = 3, d: int = 32, depth: int = 4,
                 classes: int = 10, drop_path: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        self.patch = patch
        self.patch_embed = nn.Linear(channels * patch * patch, d)
        self.patch_embed.requires_grad_(False)  # pretrained, frozen for fine-tuning
        self.register_buffer("pos", torch.randn((image // patch) ** 2, d) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(d, drop_path, seed=1000 * seed + i) for i in range(depth))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) images -> (B, patches, d) tokens: non-overlapping patches, flattened, projected."""
        patches = torch.nn.functional.unfold(images, self.patch, stride=self.patch).transpose(1, 2)
        return self.patch_embed(patches) + self.pos

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x).mean(dim=1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.classify(x)


def vit_checkpoint_scene(vit_forward: Callable, image: int, patch: int, d: int, depth: int, p: float, batch: int,
                         seed: int) -> dict[str, Any]:
    """One fine-tuning step of a TinyViT in training mode through `vit_forward(vit, images)` (cross-entropy on
    random labels): whether the frozen patch embedding got a gradient, the gradients of the parameters that require
    one (None where there is none), each block's drop-path generator state after the step, then the bytes a second
    call saves for backward."""
    torch.manual_seed(seed)
    vit = TinyViT(image, patch, 3, d, depth, 10, p, seed=seed).train()
    images, labels = torch.randn(batch, 3, image, image), torch.randint(0, 10, (batch,))
    torch.manual_seed(seed + 1)
    out = vit_forward(vit, images)
    if not isinstance(out, torch.Tensor) or out.shape != (batch, 10):
        return {"output": repr(getattr(out, "shape", out))}
    torch.nn.functional.cross_entropy(out, labels).backward()
    scene: dict[str, Any] = {
        "output": "ok", "frozen_grad": vit.patch_embed.weight.grad is not None,
        "grads": {name: q.grad for name, q in vit.named_parameters() if q.requires_grad},
        "generators": [block.drop_path.generator.get_state() for block in vit.blocks]}
    torch.manual_seed(seed + 1)
    scene["saved"] = saved_activation_bytes(vit_forward, vit, images)
    return scene
