"""Checks for lab 01 (where the memory goes). Each check runs PUBLIC cases; grading/hidden/ch01.py runs held-out
ones through the same `expect_*` helpers, with the same arguments as the check call."""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answer_each,
    answered,
    expect_equal,
    expect_reasoning,
    guarded,
    observe,
    own_work,
    run_check,
)
from utils.course.scenes.ch01 import no_leak_scene
from utils.ledger.budget import reported_bytes
from utils.ledger.gpt import transformer_activation_bytes
from utils.lessons.estimate import measure_step
from utils.lessons.measure import optimizer_state_bytes, saved_activation_bytes
from utils.lessons.models import GPT, Block, CausalSelfAttention, GPTConfig, gpt_batch, mlp
from utils.lessons.profiling import largest_fitting

MIB = 2**20


# 1.1 -------------------------------------------------------------------------------------------------------------
class TwoHeads(nn.Module):
    """A shared trunk and two task heads; `model(x, task)` runs one head, so the other gets no gradient."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(hidden, d_out), nn.Linear(hidden, 2 * d_out)])

    def forward(self, x: torch.Tensor, task: int) -> torch.Tensor:
        return self.heads[task](self.trunk(x))


class TopOneMoE(nn.Module):
    """A router and `experts` MLP experts; each token goes to its top-1 expert (weighted by the router's
    probability), so an expert no token chose gets no gradient."""

    def __init__(self, d: int, experts: int, hidden: int) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(mlp(d, hidden, d) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.router(x).softmax(-1)
        weight, choice = probs.max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero().flatten()
            if len(rows):
                out = out.index_add(0, rows, expert(x[rows]) * weight[rows, None])
        return out


def adam_truth(model: nn.Module, batch: tuple, amsgrad: bool) -> int:
    """The bytes torch.optim.Adam holds after one real step on model(*batch).float().sum() (a copy of the model)."""
    model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), amsgrad=amsgrad)
    model(*batch).float().sum().backward()
    opt.step()
    return optimizer_state_bytes(opt)


def expect_adam_state_bytes(adam_state_bytes: Callable[[nn.Module, tuple, bool], int],
                            cases: Sequence[tuple[str, nn.Module, tuple, bool]]) -> None:
    with own_work(adam_truth, optimizer_state_bytes, torch.optim.Adam, torch.optim.AdamW,
                  torch.optim.Optimizer.step):  # the answers first, in one batch, before any truth exists
        answers = answer_each(adam_state_bytes, [(copy.deepcopy(model), batch, amsgrad)
                                                 for _, model, batch, amsgrad in cases])
    for (label, model, batch, amsgrad), got in zip(cases, answers, strict=True):
        expect_equal(got, adam_truth(model, batch, amsgrad),
                     f"Adam(amsgrad={amsgrad}) state bytes after one step of {label}",
                     hint="Adam gives state only to a parameter that HAS a gradient when step() runs (frozen ones, "
                     "and ones this forward never used, have grad None): two moments shaped and typed like it, a "
                     "third (max_exp_avg_sq) with amsgrad, and a 4-byte float32 step counter per tensor. Run the "
                     "backward yourself to see which parameters get a gradient.")


def check_adam_state_bytes(adam_state_bytes: Callable[[nn.Module, tuple, bool], int]) -> Verdict:
    """Exercise 1.1: Adam's state bytes after one step, without an optimizer: which parameters get state at all."""

    def body() -> None:
        torch.manual_seed(0)
        frozen = mlp(8, 16, 4)
        frozen[0].requires_grad_(False)
        expect_adam_state_bytes(adam_state_bytes, [
            ("an MLP with a frozen first layer", frozen, (torch.randn(3, 8),), False),
            ("a two-headed model running head 0", TwoHeads(8, 16, 4), (torch.randn(3, 8), 0), False),
            ("a BF16 MLP", mlp(6, 12, 3).to(torch.bfloat16), (torch.randn(2, 6, dtype=torch.bfloat16),), True),
        ])

    return run_check("1.1", body)


# 1.2 -------------------------------------------------------------------------------------------------------------
class _Held:
    """What the truth's pack hook hands autograd instead of a saved tensor: a holder of the tensor. When backward has
    used it, autograd drops this object, and its finalizer releases the storage's share."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def saved_timeline_truth(fn: Callable[..., Any], *args: Any) -> list[int]:
    """The bytes autograd keeps saved for backward: after `out = fn(*args)` returns, then after each storage is
    released while `out.sum().backward()` runs (one entry per storage, in the order backward lets go of them; each
    storage once and whole; parameters and their views excluded; a storage let go before the forward returns, a
    branch the output does not depend on, in no entry). Its first entry is
    utils.lessons.measure.saved_activation_bytes and its last 0 (tests/test_ch01_checks.py)."""
    shares: dict[int, list] = {}  # storage key -> [saved tensors still held, bytes, the storage (keeps its address)]
    held, timeline, returned = [0], [], [False]

    def release(key: int) -> None:
        shares[key][0] -= 1
        if shares[key][0] == 0:
            held[0] -= shares[key][1]
            if returned[0]:  # a storage let go before the forward returns is in no entry
                timeline.append(held[0])

    def pack(t: torch.Tensor) -> Any:
        if isinstance(t._base if t._base is not None else t, nn.Parameter):
            return t
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in shares:
            shares[key] = [0, storage.nbytes(), storage]
            held[0] += storage.nbytes()
        shares[key][0] += 1
        box = _Held(t)
        weakref.finalize(box, release, key)
        return box

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.tensor if type(box) is _Held else box):
        out = fn(*args)
    timeline.append(held[0])
    returned[0] = True
    out.sum().backward()
    del out
    return timeline


def under_autocast(model: nn.Module) -> Callable[..., torch.Tensor]:
    """model run under CPU BF16 autocast (the function a check hands to saved_bytes_through_backward)."""
    def run(*args: Any) -> torch.Tensor:
        with torch.autocast("cpu", torch.bfloat16):
            return model(*args)

    return run


def expect_saved_timeline(saved_bytes_through_backward: Callable[..., list],
                          cases: Sequence[tuple[str, Any, tuple]]) -> None:
    saved_bytes_through_backward = guarded(saved_bytes_through_backward, saved_timeline_truth,
                                           saved_activation_bytes)
    for name, fn, args in cases:
        want = saved_timeline_truth(fn, *args)
        got = saved_bytes_through_backward(fn, *args)
        if isinstance(got, list) and got and got[0] != want[0]:
            raise CheckFailed(f"{want[0]:,} bytes saved when the forward of {name} returns", f"{got[0]:,}",
                              "count each storage once and whole (t.untyped_storage().nbytes()), skip parameters "
                              "and their views (look at t._base), and count everything else autograd saves: "
                              "autocast's BF16 copies of weights, indices, masks.")
        expect_equal(got, want, f"the saved bytes through the backward of {name}",
                     hint="one entry when the forward returns, then one each time the LAST saved reference to a "
                     "storage is let go during out.sum().backward() (a storage saved twice is freed once). Have "
                     "pack return a small object of your own holding the tensor (unpack returns the tensor): "
                     "autograd drops that object when backward no longer needs it, which weakref.finalize can see.")


def check_saved_timeline(saved_bytes_through_backward: Callable[..., list]) -> Verdict:
    """Exercise 1.2: a saved-tensor hook that watches backward let go of what the forward saved."""

    def body() -> None:
        cfg = GPTConfig(n_layer=2, d_model=32, seq_len=16, vocab_size=50)
        eager = GPTConfig(n_layer=1, d_model=32, seq_len=16, vocab_size=50, attention="eager")
        expect_saved_timeline(saved_bytes_through_backward, [
            ("a GPT and its loss under BF16 autocast", under_autocast(GPT(cfg)), gpt_batch(cfg, 2)),
            ("a GPT with eager attention and its loss", GPT(eager), gpt_batch(eager, 2)),
        ])

    return run_check("1.2", body)


# 1.3 and 1.4 -----------------------------------------------------------------------------------------------------
class ParallelBlock(nn.Module):
    """GPT-J's and PaLM's layout (the lab shows this class): ONE LayerNorm feeds attention and the MLP side by side,
    x + attn(ln(x)) + mlp(ln(x)); attention and MLP as in utils.lessons.models.Block."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        return x + self.attn(h) + self.mlp(h)


# The predicted block is GPT-J-6B's width (d_model 4,096, 16 heads) at its 2,048-token context, batch 32: about
# 14 GiB saved, more than a laptop holds, so the prediction cannot be measured first. Its truth is the formula
# below, which equals the measurement at every shape that runs (tests/test_ch01_checks.py).
PREDICT_BLOCK = (32, 2048, 4096, 16)  # batch, seq_len, d_model, n_head of the block whose bytes are predicted
MEASURE_SHAPES = [(6, 48, 96, 4), (2, 16, 32, 2)]  # the public shapes measure_block is checked on


def parallel_block_formula(batch: int, seq_len: int, d_model: int, n_head: int, attention: str, precision: str
                           ) -> int:
    """The bytes one ParallelBlock saves, by formula (for the shapes no laptop runs). FP32: ln's output is one
    storage that qkv and fc1 both save. BF16 autocast: the residual stream and ln stay FP32, and qkv and fc1 each
    save their OWN BF16 cast of ln's output (autocast caches casts of weights, not of activations)."""
    n, d, t = batch * seq_len, d_model, seq_len
    c = 4 if precision == "fp32" else 2
    total = 4 * (n * d + 2 * n)                               # ln: FP32 input + mean and 1/std per token
    total += 4 * n * d if precision == "fp32" else 2 * 2 * n * d  # ln's output, once; or two BF16 casts of it
    total += 3 * c * n * d + 4 * c * n * d + 4 * c * n * d     # q/k/v (one storage), GELU's input, fc2's input
    if attention == "sdpa":
        total += c * n * d + 4 * batch * n_head * t            # SDPA's output (= proj's input), FP32 log-sum-exp
    else:
        total += t * t + c * batch * n_head * t * t + c * n * d  # bool mask, probabilities, proj's input (a copy)
    if precision == "bf16-mixed":
        total += 2 * 12 * d * d                               # BF16 copies of the four matmul weights
    return total


def block_prediction_truth() -> int:
    """The saved bytes of one FP32 SDPA ParallelBlock at PREDICT_BLOCK, by formula (no run)."""
    return parallel_block_formula(*PREDICT_BLOCK, "sdpa", "fp32")


def block_truth(batch: int, seq_len: int, d_model: int, n_head: int, attention: str = "sdpa",
                precision: str = "fp32") -> int:
    """The measured saved bytes of one ParallelBlock on an input that requires grad (under CPU BF16 autocast for
    precision "bf16-mixed")."""
    torch.manual_seed(0)
    block = ParallelBlock(GPTConfig(n_layer=1, d_model=d_model, n_head=n_head, seq_len=seq_len, attention=attention))
    x = torch.randn(batch, seq_len, d_model, requires_grad=True)
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16-mixed"):
        return saved_activation_bytes(block, x)


def expect_block_measurements(measure_block: Callable[[int, int, int, int], int],
                              shapes: Sequence[tuple[int, int, int, int]]) -> None:
    measure_block = guarded(measure_block, block_truth, saved_activation_bytes, saved_timeline_truth)
    for shape in shapes:
        expect_equal(measure_block(*shape), block_truth(*shape),
                     "measure_block(batch={}, seq_len={}, d_model={}, n_head={})".format(*shape),
                     hint="build ParallelBlock(GPTConfig(n_layer=1, d_model=..., n_head=..., seq_len=...)), give it "
                     "a torch.randn(batch, seq_len, d_model, requires_grad=True) input and take the first entry of "
                     "your exercise 1.2 (what is saved when the forward returns, parameters excluded).")


def check_block_prediction(prediction: int, reasoning: str, measure_block: Callable[[int, int, int, int], int]
                           ) -> Verdict:
    """Exercise 1.3: a parallel block's saved bytes predicted (within 5%) with its reasoning, then measured."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float):
            raise CheckFailed("prediction as a number of bytes", repr(guess))
        expect_reasoning(reasoning, "1.3")
        truth = block_prediction_truth()
        if abs(guess - truth) > 0.05 * truth:
            raise CheckFailed("a prediction within 5% of what that block saves", f"{guess:,}",
                              "go op by op as chapter 01 does for its Block, then ask what the parallel layout "
                              "changes: how many LayerNorms, and which Linear inputs are now the same storage? Check "
                              "your terms against measure_block at small shapes, where you can measure.")
        expect_block_measurements(measure_block, MEASURE_SHAPES)

    return run_check("1.3", body, points=2)


def block_formula_truth(batch: int, seq_len: int, d_model: int, n_head: int, attention: str, precision: str) -> int:
    """One ParallelBlock's saved bytes: measured where the shape runs on a laptop, by formula beyond."""
    if batch * seq_len * d_model * max(seq_len, 4 * d_model) <= 2**31:
        return block_truth(batch, seq_len, d_model, n_head, attention, precision)
    return parallel_block_formula(batch, seq_len, d_model, n_head, attention, precision)


def expect_block_formula(block_saved_bytes: Callable[..., int], cases: Sequence[tuple]) -> None:
    block_saved_bytes = guarded(block_saved_bytes, block_formula_truth, parallel_block_formula, block_truth,
                                transformer_activation_bytes, saved_activation_bytes, saved_timeline_truth)
    for case in cases:
        got = block_saved_bytes(*case)
        expect_equal(got, block_formula_truth(*case),
                     "block_saved_bytes(batch={}, seq_len={}, d_model={}, n_head={}, attention={!r}, "
                     "precision={!r})".format(*case),
                     hint="start from chapter 01's terms for its Block and change what the parallel layout changes. "
                     "Under bf16-mixed the residual stream and ln stay FP32, the matmuls save BF16 inputs, each "
                     "matmul keeps a BF16 copy of its weight, and an FP32 activation read by two matmuls is cast "
                     "(and saved) twice: measure it with the first entry of your exercise 1.2 under torch.autocast.")


def check_block_formula(block_saved_bytes: Callable[..., int]) -> Verdict:
    """Exercise 1.4: a formula for one parallel block's saved bytes, any size, both attentions, FP32 and BF16
    autocast."""

    def body() -> None:
        expect_block_formula(block_saved_bytes, [
            (4, 64, 128, 4, "sdpa", "fp32"), (4, 64, 128, 4, "eager", "fp32"), (2, 32, 64, 2, "sdpa", "bf16-mixed"),
            (1, 2048, 4096, 16, "sdpa", "bf16-mixed"),  # GPT-J-6B's block: a formula, not a run
        ])

    return run_check("1.4", body, points=2)


# 1.5 -------------------------------------------------------------------------------------------------------------
def reference_losses(cfg: GPTConfig, steps: int, seed: int) -> tuple[list[float], list[float]]:
    """The training and validation losses of a correct loop (SGD, lr 0.1) from a model seeded with `seed`."""
    torch.manual_seed(seed)
    model = GPT(cfg)
    train, val = gpt_batch(cfg, 4, seed=seed), gpt_batch(cfg, 4, seed=seed + 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_losses, val_losses = [], []
    for _ in range(steps):
        loss = model(*train)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        train_losses.append(loss.item())
        with torch.no_grad():
            val_losses.append(model(*val).item())
    return train_losses, val_losses


def expect_no_leak(train_with_validation: Callable[..., Any], cfg: GPTConfig, steps: int, seed: int) -> None:
    """The learner's loop runs in a scene (utils.course.scenes.ch01) under a saved-tensor hook that remembers
    (weakly) every activation saved; after it returns, none may be alive, and the losses must be the reference
    ones, as Python floats."""
    train_with_validation = guarded(train_with_validation, reference_losses)
    want_train, want_val = reference_losses(cfg, steps, seed)
    got = observe(no_leak_scene, train_with_validation, dataclasses.asdict(cfg), steps, seed)
    if got["kinds"] is None:
        raise CheckFailed("a tuple (train_losses, val_losses)", got["type"])
    if got["alive_bytes"]:
        raise CheckFailed("no activation alive after the loop returns",
                          f"{got['alive_bytes']:,} bytes of saved activations still alive",
                          "a forward pass run with gradients enabled builds a graph that holds every saved tensor "
                          "until backward or until the last reference to its output goes: validate under "
                          "torch.no_grad(), and keep floats, not tensors.")
    for name, kind, values, want in (("train_losses", got["kinds"][0], got["values"][0], want_train),
                                     ("val_losses", got["kinds"][1], got["values"][1], want_val)):
        if kind != ["float"]:
            raise CheckFailed(f"{name} as a list of Python floats", f"{kind}",
                              "a loss tensor is the root of its graph: .item() turns it into a float.")
        if len(values) != len(want) or any(abs(a - b) > 1e-4 * max(1.0, abs(b))
                                           for a, b in zip(values, want, strict=False)):
            raise CheckFailed(f"{name} = {[round(v, 4) for v in want]}", [round(v, 4) for v in values],
                              "fix the leak without changing what the loop computes.")


def check_no_leak(train_with_validation: Callable[..., Any]) -> Verdict:
    """Exercise 1.5: the training loop with validation, leak fixed."""

    def body() -> None:
        expect_no_leak(train_with_validation, GPTConfig(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab_size=40),
                       steps=3, seed=0)

    return run_check("1.5", body, points=2)


# 1.6 -------------------------------------------------------------------------------------------------------------
def measured_peak(cfg: GPTConfig, batch: int) -> int:
    """The measured peak bytes of an FP32 AdamW training step of GPT(cfg) at this batch, on the CPU."""
    torch.manual_seed(0)
    model = GPT(cfg)
    return measure_step(model, gpt_batch(cfg, batch), optimizer="adamw", precision="fp32")


def expect_largest_batch(largest_batch: Callable[[GPTConfig, int], int],
                         cases: Sequence[tuple[GPTConfig, int]]) -> None:
    """Each answer proven by measured steps: its batch fits (0 claims that none does) and the batch two above does
    not. A step peaks at the larger of backward's start and the optimizer step, so a case whose budget is below the
    optimizer step (a short sequence) fails an answer that models backward's start only."""
    # by formula: the check's measuring tools and any backward pass of the learner's own (a search by real steps) fail
    largest_batch = guarded(largest_batch, measured_peak, measure_step, largest_fitting, torch.Tensor.backward,
                            torch.autograd.backward)
    for cfg, budget in cases:
        what = (f"largest_batch for n_layer={cfg.n_layer}, d_model={cfg.d_model}, seq_len={cfg.seq_len}, "
                f"vocab_size={cfg.vocab_size}, attention={cfg.attention!r}, budget {budget / MIB:.2f} MiB")
        got = largest_batch(cfg, budget)
        if isinstance(got, bool) or not isinstance(got, int) or got < 0:
            raise CheckFailed(f"{what}: an int, 0 if no batch fits", repr(got))
        if got > 0:
            peak = measured_peak(cfg, got)
            if peak > budget:
                raise CheckFailed(f"{what}: a batch whose measured step peak fits the budget",
                                  f"batch {got}, whose step peaks at {peak / MIB:.2f} MiB",
                                  "a step peaks at the larger of two moments: backward's start (every saved "
                                  "activation, the parameters, Adam's moments, the logits' two FP32 gradients) and "
                                  "the optimizer step (parameters, gradients, Adam's moments and the step's "
                                  "temporaries), which no batch size shrinks; if it exceeds the budget, return 0.")
        bigger = measured_peak(cfg, got + 2)
        if bigger <= budget:
            raise CheckFailed(f"{what}: the largest batch that fits (within 1)",
                              f"batch {got}, but batch {got + 2} peaks at {bigger / MIB:.2f} MiB, inside the budget",
                              "your formula overestimates: are gradients alive at backward's start? (zero_grad with "
                              "set_to_none=True frees them before the next forward)")


def check_largest_batch(largest_batch: Callable[[GPTConfig, int], int]) -> Verdict:
    """Exercise 1.6: the largest batch under a budget, computed by formula and proven by measured steps: one case
    where backward's start decides, one (eight tokens per sequence) where the optimizer step alone exceeds it."""

    def body() -> None:
        expect_largest_batch(largest_batch, [
            (GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256), 12 * MIB),
            (GPTConfig(n_layer=2, d_model=128, n_head=4, seq_len=8, vocab_size=256), 13 * MIB // 2),
        ])

    return run_check("1.6", body, points=3)


# 1.7 -------------------------------------------------------------------------------------------------------------
# A Llama-style decoder (Llama 3's layout): RMSNorm before attention and MLP, grouped-query attention (n_kv_head
# key/value heads shared by n_head query heads, no biases), a SwiGLU MLP (gate, up, down), a final RMSNorm and an
# output head that is tied to the embedding or not. Built on the meta device: exact counts, no memory.
LLAMA_KEYS = ("d_model", "n_layer", "n_head", "n_kv_head", "ffn_hidden", "vocab", "tied")
# An "80 GB" GPU (A100 80GB, H100) as torch reports it: 79.1 GiB (the course's units convention: a card's "GB" is
# its label; what counts is torch.cuda.get_device_properties(i).total_memory)
GPU_80GB = reported_bytes("H100 (80 GB)")


class _LlamaBlock(nn.Module):
    def __init__(self, d: int, n_head: int, n_kv_head: int, ffn: int) -> None:
        super().__init__()
        head = d // n_head
        self.attn_norm, self.mlp_norm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.q, self.o = nn.Linear(d, n_head * head, bias=False), nn.Linear(n_head * head, d, bias=False)
        self.k, self.v = (nn.Linear(d, n_kv_head * head, bias=False) for _ in range(2))
        self.gate, self.up = (nn.Linear(d, ffn, bias=False) for _ in range(2))
        self.down = nn.Linear(ffn, d, bias=False)


class LlamaStyle(nn.Module):
    """The parameters of a Llama-style model (no forward: this exercise counts; chapter 01's GPT measures)."""

    def __init__(self, d_model: int, n_layer: int, n_head: int, n_kv_head: int, ffn_hidden: int, vocab: int,
                 tied: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(_LlamaBlock(d_model, n_head, n_kv_head, ffn_hidden) for _ in range(n_layer))
        self.norm = nn.RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight


def llama_plan_truth(cfg: dict) -> dict[str, int]:
    """Parameters (tied weights once), model-state bytes of full training with AdamW under torch.amp (FP32
    weights 4, gradients 4, two moments 8: 16 B per parameter), and the fewest "80 GB" GPUs (79.1 GiB reported
    each) that hold those states when sharded evenly (ZeRO-3 / FSDP), before any activation."""
    with torch.device("meta"):
        model = LlamaStyle(**{k: cfg[k] for k in LLAMA_KEYS})
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "state_bytes": 16 * params, "gpus_80gb": -(-16 * params // GPU_80GB)}


# Hugging Face's Llama, the library implementation (watched only where the learner's code imported it)
HF_LLAMA = ("transformers.models.llama.modeling_llama:LlamaModel",
            "transformers.models.llama.modeling_llama:LlamaForCausalLM",
            "transformers.models.llama.modeling_llama:LlamaDecoderLayer")
LLAMA3_8B = {"d_model": 4096, "n_layer": 32, "n_head": 32, "n_kv_head": 8, "ffn_hidden": 14336, "vocab": 128256,
             "tied": False}


def expect_llama_plans(llama_plan: Callable[[dict], dict], cases: Sequence[dict]) -> None:
    llama_plan = guarded(llama_plan, llama_plan_truth, LlamaStyle, _LlamaBlock, *HF_LLAMA)
    for cfg in cases:
        want = llama_plan_truth(cfg)
        got = llama_plan(dict(cfg))
        if not isinstance(got, dict) or set(got) != set(want):
            raise CheckFailed(f"a dict with keys {sorted(want)}", repr(got))
        what = ", ".join(f"{k}={cfg[k]}" for k in LLAMA_KEYS)
        hints = {"params": "per layer: two RMSNorm weights (d each, no bias), q and o (d x d), k and v (d x "
                           "n_kv_head * d / n_head: grouped-query attention), SwiGLU's gate, up and down (three d x "
                           "ffn_hidden); then the embedding, the final RMSNorm, and the head unless it is tied.",
                 "state_bytes": "16 bytes per parameter: FP32 weights and gradients, Adam's two FP32 moments.",
                 "gpus_80gb": "round the state bytes up to whole GPUs of what torch reports for an '80 GB' card: "
                              "utils.ledger.budget.reported_bytes('H100'), 79.1 GiB (not 80 x 10^9 bytes, not 80 GiB)."}
        for key in ("params", "state_bytes", "gpus_80gb"):
            expect_equal(got[key], want[key], f"llama_plan({what})[{key!r}]", hint=hints[key])


def check_llama_plan(llama_plan: Callable[[dict], dict]) -> Verdict:
    """Exercise 1.7: chapter 01's accounting carried to a Llama-style model (GQA, SwiGLU, RMSNorm, untied 128k
    vocabulary) that no laptop trains, and the GPUs its model states need."""

    def body() -> None:
        expect_llama_plans(llama_plan, [
            {"d_model": 64, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "ffn_hidden": 172, "vocab": 1000,
             "tied": False},
            LLAMA3_8B,
        ])

    return run_check("1.7", body, points=2)


# 1.8 -------------------------------------------------------------------------------------------------------------
class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable rank-r update: y = base(x) + (x A^T) B^T (the lab shows this class)."""

    def __init__(self, base: nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.a.t()) @ self.b.t()


def lora_block(d_model: int, n_head: int, seq_len: int, rank: int) -> Block:
    """A utils.lessons.models.Block with every weight frozen and LoRA adapters on attention's qkv and proj."""
    block = Block(GPTConfig(n_layer=1, d_model=d_model, n_head=n_head, seq_len=seq_len)).requires_grad_(False)
    block.attn.qkv = LoRALinear(block.attn.qkv, rank)
    block.attn.proj = LoRALinear(block.attn.proj, rank)
    return block


def lora_block_truth(batch: int, seq_len: int, d_model: int, n_head: int, rank: int) -> int:
    """The measured saved bytes of lora_block (FP32, SDPA) on an input that requires grad."""
    torch.manual_seed(0)
    block = lora_block(d_model, n_head, seq_len, rank)
    return saved_activation_bytes(block, torch.randn(batch, seq_len, d_model, requires_grad=True))


def lora_block_formula(batch: int, seq_len: int, d_model: int, n_head: int, rank: int) -> int:
    """lora_block_truth by formula (equal at every shape that runs; tests/test_ch01_checks.py), for the shapes
    no laptop runs: frozen fc1/fc2/qkv/proj save no input for their own weights; the adapters' A saves its input
    and B saves the rank-wide x A^T."""
    n, d = batch * seq_len, d_model
    saved = 2 * (n * d + 2 * n)            # two LayerNorms: input + mean and 1/std per token
    saved += n * d + 3 * n * d + n * d      # ln1's output (qkv's A), q/k/v (one storage), SDPA's output (proj's A)
    saved += 2 * n * rank + 4 * n * d       # the two rank-wide x A^T, GELU's input
    return 4 * saved + 4 * batch * n_head * seq_len  # FP32, plus SDPA's FP32 log-sum-exp per row and head


def expect_lora_block(lora_block_saved_bytes: Callable[..., int], cases: Sequence[tuple[int, int, int, int, int]],
                      big: Sequence[tuple[int, int, int, int, int]] = ()) -> None:
    fn = guarded(lora_block_saved_bytes, lora_block_truth, lora_block_formula, lora_block, block_formula_truth,
                 transformer_activation_bytes, saved_activation_bytes)
    for case in cases:
        expect_equal(fn(*case), lora_block_truth(*case),
                     "lora_block_saved_bytes(batch={}, seq_len={}, d_model={}, n_head={}, rank={})".format(*case),
                     hint="a frozen Linear needs no input for a weight gradient it does not compute: which Linear "
                     "inputs are still saved? The adapters' A saves its input (shared with whom?), B saves x A^T.")
    for case in big:  # shapes no laptop runs: the same formula must carry them
        expect_equal(fn(*case), lora_block_formula(*case),
                     "lora_block_saved_bytes(batch={}, seq_len={}, d_model={}, n_head={}, rank={})".format(*case))


def check_lora_block(lora_block_saved_bytes: Callable[..., int]) -> Verdict:
    """Exercise 1.8: what a block saves when its weights are frozen and LoRA adapters train (not in chapter 01)."""

    def body() -> None:
        expect_lora_block(lora_block_saved_bytes, [(6, 48, 96, 4, 8), (2, 16, 32, 2, 4)],
                          big=[(8, 8192, 4096, 32, 16)])

    return run_check("1.8", body, points=2)
