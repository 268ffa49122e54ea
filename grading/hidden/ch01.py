"""Held-out cases for lab 01 (where the memory goes). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other models, dtypes, shapes, seeds and budgets than the public cases, chosen so that an answer tuned to those
cases fails.
"""

from __future__ import annotations

import torch

from utils.course.checks.ch01 import (
    MIB,
    TopOneMoE,
    TwoHeads,
    expect_adam_state_bytes,
    expect_block_formula,
    expect_block_measurements,
    expect_largest_batch,
    expect_llama_plans,
    expect_lora_block,
    expect_no_leak,
    expect_saved_timeline,
    under_autocast,
)
from utils.lessons.models import GPT, GPTConfig, gpt_batch, mlp


def adam_cases(adam_state_bytes) -> None:
    """Head 1 of the two-headed model with amsgrad, a mixture of experts where some expert gets no token, an FP16
    model, a frozen middle layer, a GPT whose loss uses every parameter."""
    torch.manual_seed(1)
    frozen = mlp(8, 16, 4, depth=3)
    frozen[2].requires_grad_(False)
    torch.manual_seed(3)
    moe = TopOneMoE(6, 8, 10)
    cfg = GPTConfig(n_layer=1, d_model=24, n_head=3, seq_len=8, vocab_size=33)
    expect_adam_state_bytes(adam_state_bytes, [
        ("a two-headed model running head 1", TwoHeads(5, 9, 3), (torch.randn(4, 5), 1), True),
        ("a top-1 mixture of 8 experts on 3 tokens", moe, (torch.randn(3, 6),), False),
        ("the same mixture with amsgrad", moe, (torch.randn(3, 6),), True),
        ("an FP16 MLP", mlp(5, 7, 2, depth=1).half(), (torch.randn(2, 5, dtype=torch.float16),), False),
        ("an MLP with a frozen middle layer", frozen, (torch.randn(2, 8),), True),
        ("a GPT and its loss", GPT(cfg), gpt_batch(cfg, 2), False),
    ])


def saved_cases(saved_bytes_through_backward) -> None:
    """Views of one tensor (one storage, saved twice: freed once), an expanded input, a convolution, a BF16 model,
    an SDPA GPT under autocast, a model that is itself BF16 under autocast."""
    cfg = GPTConfig(n_layer=1, d_model=24, n_head=3, seq_len=12, vocab_size=17)
    x = torch.randn(8, 8, requires_grad=True)
    e = torch.randn(1, 6, requires_grad=True)
    expect_saved_timeline(saved_bytes_through_backward, [
        ("x[:4] * x[4:] (two views of one storage)", lambda a: a[:4] * a[4:], (x,)),
        ("a convolution and a ReLU", torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()),
         (torch.randn(2, 3, 8, 8),)),
        ("an expanded input times itself", lambda a: a.expand(5, 6) * a.expand(5, 6).sin(), (e,)),
        ("a BF16 MLP", mlp(6, 10, 2).to(torch.bfloat16), (torch.randn(3, 6, dtype=torch.bfloat16),)),
        ("a GPT's logits under BF16 autocast", under_autocast(GPT(cfg)), (gpt_batch(cfg, 3, seed=4)[0],)),
        ("an MLP under BF16 autocast", under_autocast(mlp(8, 32, 4, depth=3)), (torch.randn(5, 8),)),
        ("a BF16 MLP under autocast", under_autocast(mlp(6, 10, 2).to(torch.bfloat16)),
         (torch.randn(3, 6, dtype=torch.bfloat16),)),
    ])


def block_prediction_cases(prediction, reasoning, measure_block) -> None:
    """measure_block on odd shapes: one token, uneven heads, a wide block."""
    expect_block_measurements(measure_block, [(1, 1, 8, 2), (3, 33, 40, 5), (2, 20, 120, 6)])


def block_formula_cases(block_saved_bytes) -> None:
    """Odd shapes, one-token sequences, many heads, both attentions and precisions; PaLM-like and 70B-wide blocks
    by formula."""
    expect_block_formula(block_saved_bytes, [
        (3, 17, 40, 5, "eager", "fp32"), (1, 1, 8, 1, "sdpa", "fp32"), (5, 100, 48, 12, "eager", "bf16-mixed"),
        (7, 9, 36, 4, "sdpa", "bf16-mixed"), (2, 2048, 2048, 16, "sdpa", "fp32"),
        (1, 8192, 8192, 64, "eager", "bf16-mixed"), (1, 1, 8, 2, "eager", "bf16-mixed"),
    ])


def leak_cases(train_with_validation) -> None:
    """Another model, more steps, another seed."""
    expect_no_leak(train_with_validation, GPTConfig(n_layer=1, d_model=24, n_head=3, seq_len=10, vocab_size=29,
                                                    attention="eager"), steps=5, seed=3)


def largest_batch_cases(largest_batch) -> None:
    """A large vocabulary (the logits' gradients dominate), eager attention, a deeper model, and a short sequence
    whose optimizer step alone exceeds the budget (no batch fits)."""
    expect_largest_batch(largest_batch, [
        (GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=32, vocab_size=4096), 10 * MIB),
        (GPTConfig(n_layer=3, d_model=48, n_head=4, seq_len=48, vocab_size=128, attention="eager"), 9 * MIB),
        (GPTConfig(n_layer=1, d_model=96, n_head=4, seq_len=4, vocab_size=512, attention="eager"), 3 * MIB),
    ])


def llama_plan_cases(llama_plan) -> None:
    """Tied embeddings (Llama 3.2 1B), plain multi-head (n_kv_head = n_head), multi-query (one KV head)."""
    expect_llama_plans(llama_plan, [
        {"d_model": 2048, "n_layer": 16, "n_head": 32, "n_kv_head": 8, "ffn_hidden": 8192, "vocab": 128256,
         "tied": True},
        {"d_model": 96, "n_layer": 3, "n_head": 6, "n_kv_head": 6, "ffn_hidden": 256, "vocab": 500, "tied": False},
        {"d_model": 128, "n_layer": 1, "n_head": 8, "n_kv_head": 1, "ffn_hidden": 344, "vocab": 32000, "tied": True},
        {"d_model": 8192, "n_layer": 80, "n_head": 64, "n_kv_head": 8, "ffn_hidden": 28672, "vocab": 128256,
         "tied": False},  # Llama 3 70B
    ])


def lora_block_cases(lora_block_saved_bytes) -> None:
    """Odd shapes, one token, rank 1, a wide block with a large rank; a 70B width at 8,192 tokens by formula."""
    expect_lora_block(lora_block_saved_bytes, [(3, 33, 40, 5, 3), (1, 1, 8, 2, 1), (2, 20, 120, 6, 16)],
                      big=[(2, 8192, 8192, 64, 64)])


HIDDEN = {
    "1.1": adam_cases,
    "1.2": saved_cases,
    "1.3": block_prediction_cases,
    "1.4": block_formula_cases,
    "1.5": leak_cases,
    "1.6": largest_batch_cases,
    "1.7": llama_plan_cases,
    "1.8": lora_block_cases,
}
