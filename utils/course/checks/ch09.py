"""Checks for lab 09 (capstone: fit a model into a budget). The `expect_*` helpers run cases; the grader's hidden
cases (grading/hidden/ch09.py) call them with other sizes, optimizers, ranks, vocabularies, budgets and chunks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

import utils.ledger.plan
from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answered,
    expect_close,
    expect_reasoning,
    guarded,
    observe,
    run_check,
)
from utils.course.scenes.ch09 import (  # noqa: F401 - also imported from here (tests, the lab)
    Batches,
    TinyLM,
    chunk_case,
    chunked_loss_scene,
    finetune_scene,
    finetune_setup,
)
from utils.course.scenes.live_peak import MODE_SWITCHES
from utils.ledger.gpt import shape_of
from utils.ledger.plan import Choice, lora_parameters, memory_of, plan, zero_bytes_per_gpu
from utils.lessons.chunked_loss import _chunk_loss, chunked_cross_entropy
from utils.lessons.measure import step_peak
from utils.lessons.models import GPT, GPTConfig, gpt_batch
from utils.lessons.plan_runs import make_optimizer, run_choice
from utils.lessons.quiet import import_torchao

LAB_CONFIG = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256)
LAB_BUDGET = 3 * 2**20
LAB_EFFECTIVE_BATCH = 16
PREDICT_RANK = 8  # exercise 9.2: LoRA rank on LAB_CONFIG's attention


# 9.1 -------------------------------------------------------------------------------------------------------------
# Megatron-LM / DeepSpeed's BF16 recipe: BF16 weights (2 B), gradients accumulated and reduced in FP32 (4 B), and an
# optimizer that keeps an FP32 master copy (4 B) beside its moments: 18 B/param with Adam, 6 + 12/d under Megatron's
# distributed optimizer (https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/dist_optimizer.html).
MOMENT_BYTES = {"adamw": 8.0, "adamw8bit": 2 * (1 + 4 / 256)}  # torchao's AdamW8bit: 1 B + an FP32 scale per 256


def states_per_gpu(n_params: int, stage: int, n_gpus: int, optimizer: str) -> float:
    """Reference for 9.1: BF16 weights 2, FP32 gradients 4, FP32 master weights 4 plus the optimizer's moments, per
    GPU under ZeRO stage 0-3 over n_gpus (the master copy is optimizer state: stage 1 divides it)."""
    w, g, k = 2.0, 4.0, 4.0 + MOMENT_BYTES[optimizer]
    if stage >= 1:
        k /= n_gpus
    if stage >= 2:
        g /= n_gpus
    if stage >= 3:
        w /= n_gpus
    return (w + g + k) * n_params


def expect_model_states(fn: Callable[[int, int, int, str], float],
                        cases: Sequence[tuple[int, int, int, str]]) -> None:
    fn = guarded(fn, states_per_gpu, zero_bytes_per_gpu)
    for n, stage, gpus, optimizer in cases:
        expected = states_per_gpu(n, stage, gpus, optimizer)
        got = fn(n, stage, gpus, optimizer)
        if not isinstance(got, int | float) or isinstance(got, bool):
            raise CheckFailed("a number of bytes", type(got).__name__, "return the bytes as an int or a float.")
        if abs(got - expected) > 1e-6 * expected + 1:
            raise CheckFailed(f"{expected:,.0f} B for {n:,} parameters, stage {stage}, {gpus} GPUs, {optimizer}",
                              f"{got:,.0f} B",
                              "BF16 weights 2, FP32 gradients 4, and the optimizer's FP32 master copy 4 plus its "
                              "moments (AdamW 8, AdamW8bit 2 x (1 + 4/256)); the master copy is optimizer state: "
                              "stage 1 divides it with the moments, stage 2 also the gradients, stage 3 also the "
                              "BF16 weights.")


def check_model_states(model_state_bytes: Callable[[int, int, int, str], float]) -> Verdict:
    """Exercise 9.1: model states per GPU, BF16 weights with FP32 gradients and master weights, ZeRO stages."""
    return run_check("9.1", lambda: expect_model_states(model_state_bytes, [
        (1_000_000, 0, 1, "adamw"), (1_000_000, 1, 4, "adamw"), (7_000_000_000, 2, 8, "adamw8bit"),
        (7_000_000_000, 3, 8, "adamw")]), points=1)


# 9.2 -------------------------------------------------------------------------------------------------------------
def lora_attention_count(cfg: GPTConfig, rank: int) -> int:
    """Trainable parameters of rank-`rank` LoRA on utils.lessons.models.GPT's attn.qkv (d x 3d) and attn.proj (d x
    d)."""
    d = cfg.d_model
    return cfg.n_layer * (rank * (d + 3 * d) + rank * (d + d))


def expect_lora_counts(count_trainable: Callable[[GPTConfig, int], int],
                       cases: Sequence[tuple[GPTConfig, int]]) -> None:
    with contextlib.suppress(ImportError):  # peft imports torchao: load it first, without its load-time stderr
        import_torchao()  # (nbgrader scores a check cell with any stderr output zero)
        import peft  # noqa: F401 - loaded once here: a grader answers each call in a fork of this process, and an
        # answer that imports peft itself would otherwise load it afresh in every fork (seconds each)
    count_trainable = guarded(count_trainable, lora_attention_count, lora_parameters)
    for cfg, rank in cases:
        expected = lora_attention_count(cfg, rank)
        got = count_trainable(cfg, rank)
        if got != expected:
            raise CheckFailed(f"{expected:,} trainable parameters for rank {rank} on {cfg.n_layer} layers of width "
                              f"{cfg.d_model}", repr(got),
                              "build GPT(cfg), inject LoRA on ['qkv', 'proj'] (not the MLP), freeze everything "
                              "but the lora_ parameters, and count p.numel() of those that require grad.")


# The prediction is for a model no laptop fine-tunes: Llama-3-8B (32 layers, d 4096, 32 query heads of 128 and 8
# key/value heads: grouped-query attention) with rank-16 adapters on its separate q, k, v and o projections.
LLAMA8B_LORA = {"n_layer": 32, "d_model": 4096, "kv_width": 8 * 128, "rank": 16}


def llama_lora_truth(n_layer: int, d_model: int, kv_width: int, rank: int) -> int:
    """r (d_in + d_out) per adapted matrix: q and o are d x d, k and v are d x kv_width."""
    return n_layer * rank * (2 * (d_model + d_model) + 2 * (d_model + kv_width))


def check_lora_prediction(prediction: Any, reasoning: Any, count_trainable: Callable[[GPTConfig, int], int]) -> Verdict:
    """Exercise 9.2: the predicted LoRA count for Llama-3-8B at rank 16 on q, k, v, o (within 2%), its reasoning,
    and a measurement (peft on the course's GPT) that counts any configuration."""

    def body() -> None:
        pred = answered(prediction, "prediction")
        expect_reasoning(reasoning, "9.2")
        truth = llama_lora_truth(**LLAMA8B_LORA)
        if not isinstance(pred, int | float) or isinstance(pred, bool) or abs(pred - truth) > 0.02 * truth:
            near_mha = abs(pred - 32 * 16 * 4 * 8192) <= 0.02 * truth if isinstance(pred, int | float) else False
            raise CheckFailed("a prediction within 2% of the count for Llama-3-8B, rank 16 on q, k, v and o",
                              repr(pred), "k and v are 4096 x 1024 under grouped-query attention (8 KV heads of "
                              "128), not 4096 x 4096." if near_mha else "an adapter on a (d_in x d_out) matrix "
                              "adds rank x (d_in + d_out); four adapted matrices per layer, 32 layers.")
        expect_lora_counts(count_trainable, [(LAB_CONFIG, PREDICT_RANK), (LAB_CONFIG, 2)])

    return run_check("9.2", body, points=2)


# 9.3 -------------------------------------------------------------------------------------------------------------
def reference_finetune(model: nn.Module, opt: torch.optim.Optimizer, train: Batches,
                       evals: Batches) -> tuple[list[float], list[float], float]:
    """The colleague's script without its three memory bugs: the accuracy from the logits' argmax without a graph,
    the logits dropped before backward, and evaluation under no_grad with a float running sum."""
    losses, accs = [], []
    model.train()
    for x, y in train:
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        with torch.no_grad():
            accs.append((logits.argmax(-1) == y).float().mean().item())
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in evals:
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    return losses, accs, total / len(evals)


PEAK_SLACK = 1.10  # a fixed script may peak at most 10% above the clean one (and may peak lower)


def expect_finetune(finetune: Callable[..., Any], cases: Sequence[tuple[int, int, int, int, int]]) -> None:
    """cases: (vocab_size, d_model, n_train, n_eval, seed). The learner's script must return the same losses,
    accuracies and evaluation loss as the clean one (as floats), and peak at most PEAK_SLACK x its peak. The script
    runs in a scene (utils.course.scenes.ch09), which measures its peak where it runs; the clean script runs in the
    same scene here."""
    finetune = guarded(finetune, reference_finetune, direct=MODE_SWITCHES)
    for case in cases:
        want = finetune_scene(reference_finetune, *case)
        cap = int(PEAK_SLACK * want["peak"])
        got = observe(finetune_scene, finetune, *case)
        if got["returned"] is not None:
            raise CheckFailed("(train losses, train accuracies, eval loss)", got["returned"],
                              "keep what the script returns.")
        if got["types"] is not None:
            raise CheckFailed("plain Python floats", ", ".join(got["types"]),
                              "log numbers with .item(), not tensors: a tensor keeps its graph alive.")
        expect_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), "the training losses", rtol=1e-4,
                     atol=1e-6, hint="fix the memory bugs without changing what is trained (same steps, same order).")
        expect_close(torch.tensor(got["accs"]), torch.tensor(want["accs"]), "the training accuracies", rtol=1e-4,
                     atol=1e-6, hint="the accuracy is the share of tokens whose most likely prediction is the target.")
        expect_close(got["eval_loss"], want["eval_loss"], "the evaluation loss", rtol=1e-4, atol=1e-6,
                     hint="the mean over the evaluation batches of their mean cross-entropy.")
        peak = got["peak"]
        if peak < cap / 4:  # the tracker follows the scene's thread: a script run elsewhere is not measured
            raise CheckFailed("a peak the check can measure (run the script in this thread)", f"{peak:,} B",
                              "run the training and evaluation directly in the function, not in another thread.")
        if peak > cap:
            raise CheckFailed(f"a peak within {cap:,} B (vocabulary {case[0]:,}, {case[3]} evaluation batches)",
                              f"{peak:,} B", "a tensor as large as the logits stays alive longer than it must: "
                              "look at what lives through backward, and at what evaluation keeps.")


def check_finetune(finetune: Callable[..., Any]) -> Verdict:
    """Exercise 9.3: a colleague's fine-tuning script, its three memory bugs fixed, proven by its measured peak."""
    return run_check("9.3", lambda: expect_finetune(finetune, [(4096, 32, 3, 4, 0)]), points=2)


# 9.4 -------------------------------------------------------------------------------------------------------------
EVAL_LIMIT = 64  # the largest evaluation batch asked for


def eval_peaks(cfg: GPTConfig, choice: Choice, eval_batches: Sequence[int]) -> list[int]:
    """The measured peak of one evaluation of GPT(cfg) trained as `choice` says (full fine-tuning) at each of
    `eval_batches`: the loss of that many sequences under torch.no_grad() (and the plan's autocast), while the
    weights and the optimizer's state, created by one training step, stay resident, as they do when a run evaluates
    between steps (one setup for all the batches: a torchao optimizer's first step is the slow part)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    if choice.precision == "bf16":
        model = model.to(torch.bfloat16)
    opt = make_optimizer(choice.optimizer, list(model.parameters()), lr=1e-3)
    auto = choice.precision == "bf16-mixed"
    x, y = gpt_batch(cfg, 1, seed=0)
    eager = mock.patch.object(torch, "compile", lambda fn=None, **_: fn if fn is not None else (lambda f: f))
    with eager:  # torchao's optimizers compile their step; eagerly on a CPU, the same bytes
        with torch.autocast("cpu", torch.bfloat16, enabled=auto):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        peaks = []
        for eval_batch in eval_batches:
            xe, ye = gpt_batch(cfg, eval_batch, seed=1)

            def evaluate(xe: torch.Tensor = xe, ye: torch.Tensor = ye) -> float:
                with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=auto):
                    return model(xe, ye).item()

            peaks.append(step_peak(evaluate, model, opt, warmup=0))
        return peaks


def expect_plan(make_plan: Callable[[GPTConfig, int, int], tuple], cfg: GPTConfig, budget: int, effective: int,
                steps: int = 4) -> None:
    # the planner and its private search, while it has one (utils/ledger/plan.py is another helper's)
    helpers = [h for h in (getattr(utils.ledger.plan, "_largest_micro_batch", None),) if callable(h)]
    make_plan = guarded(make_plan, plan, eval_peaks, *helpers)
    answer = make_plan(cfg, budget, effective)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise CheckFailed("a tuple (Choice, eval_batch)", type(answer).__name__, "return (Choice(...), eval_batch).")
    choice, eval_batch = answer
    if not isinstance(choice, Choice):
        raise CheckFailed("a utils.ledger.plan.Choice", type(choice).__name__, "return Choice(...).")
    if choice.micro_batch * choice.accumulation != effective:
        raise CheckFailed(f"micro_batch x accumulation = {effective}", f"{choice.micro_batch} x {choice.accumulation}",
                          "keep the effective batch.")
    one_process = choice.sharding == "none" and not choice.offload_optimizer and not choice.quantize_base
    if not one_process or choice.lora_rank:
        raise CheckFailed("a plan one process can run that trains the whole model", choice.describe(),
                          "no sharding, offload, NF4 base or LoRA here.")
    estimate = sum(memory_of(shape_of(cfg), choice).values())
    if estimate > budget:
        raise CheckFailed(f"a ledger total within {budget:,} B", f"{estimate:,} B ({choice.describe()})",
                          "checkpointing, smaller micro-batches and smaller optimizer states shrink the ledger.")
    peak, losses = run_choice(cfg, choice, steps=steps)
    if peak > budget:
        raise CheckFailed(f"a measured peak within {budget:,} B", f"{peak:,} B ({choice.describe()})",
                          "the ledger can be below the real peak (LoRA's small tensors, temporaries): keep a margin.")
    if not losses[-1] < losses[0]:
        raise CheckFailed("a loss that goes down", f"{losses[0]:.3f} -> {losses[-1]:.3f}", "a plan must still train.")
    if isinstance(eval_batch, bool) or not isinstance(eval_batch, int) or not 1 <= eval_batch <= EVAL_LIMIT:
        raise CheckFailed(f"an evaluation batch from 1 to {EVAL_LIMIT}", repr(eval_batch))
    bigger = min(EVAL_LIMIT, eval_batch * 5 // 4 + 1)
    measured, above = eval_peaks(cfg, choice, [eval_batch, bigger])
    if measured > budget:
        raise CheckFailed(f"an evaluation of {eval_batch} sequences within {budget:,} B with the plan's states "
                          "resident", f"a measured peak of {measured:,} B",
                          "evaluation runs between steps: the weights and the optimizer's state are still there, "
                          "and no_grad does not shrink the logits and the loss's log-probabilities.")
    if eval_batch < EVAL_LIMIT and above <= budget:
        raise CheckFailed("the largest evaluation batch that fits (within a quarter)",
                          f"{eval_batch}, but {bigger} sequences also fit",
                          "measure the evaluation's peak at two small batches: it grows linearly with the batch.")


def check_plan(make_plan: Callable[[GPTConfig, int, int], tuple]) -> Verdict:
    """Exercise 9.4: the learner's Choice keeps the effective batch, fits per the ledger, and a real run of it
    stays under the budget and learns; and the evaluation batch that fits beside the resident states."""
    return run_check("9.4", lambda: expect_plan(make_plan, LAB_CONFIG, LAB_BUDGET, LAB_EFFECTIVE_BATCH), points=3)


# 9.5 -------------------------------------------------------------------------------------------------------------
CHUNK_LOGIT_ALLOWANCE = 5  # chunk-sized FP32 tensors a chunked loss may hold at once (logits, softmax, gradients)


def _full_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """The full head's F.cross_entropy, all the logits at once (what a chunked loss must equal)."""
    return F.cross_entropy(hidden @ weight.t(), targets, ignore_index=-100)


def expect_chunked_loss(chunked_loss: Callable[..., torch.Tensor],
                        cases: Sequence[tuple[int, int, int, int, int, int]]) -> None:
    """cases: (tokens, d_model, vocab_size, chunk, pad_every, seed). Same loss and gradients as the full head's
    F.cross_entropy, and a peak of at most the gradients of the inputs plus CHUNK_LOGIT_ALLOWANCE chunks of logits.
    The loss, its backward and the peak run in a scene (utils.course.scenes.ch09); the full loss runs in the same
    scene here."""
    chunked_loss = guarded(chunked_loss, chunked_cross_entropy, _chunk_loss, direct=MODE_SWITCHES)
    for tokens, d, vocab, chunk, pad_every, seed in cases:
        want = chunked_loss_scene(_full_loss, tokens, d, vocab, chunk, pad_every, seed)
        got = observe(chunked_loss_scene, chunked_loss, tokens, d, vocab, chunk, pad_every, seed)
        if got["returned"] is not None:
            raise CheckFailed("a scalar loss tensor with a graph", got["returned"],
                              "return the mean loss as a tensor that backward() can go through.")
        what = f"{tokens} tokens, vocabulary {vocab:,}, chunks of {chunk}" + (" with padding" if pad_every else "")
        expect_close(got["loss"], want["loss"], f"the loss ({what})", rtol=1e-5, atol=1e-6,
                     hint="the mean over the tokens whose target is not -100: sum each chunk's losses, divide once.")
        for name in ("hidden", "weight"):
            if got["grads"][name] is None:
                raise CheckFailed(f"a gradient for {name}", "None", "the loss must be differentiable in both.")
            expect_close(got["grads"][name], want["grads"][name], f"the gradient of {name} ({what})", rtol=1e-4,
                         atol=1e-6)
        full, inputs, peak = 4 * tokens * vocab, want["input_bytes"], got["peak"]
        if peak < inputs:  # the two gradients alone are this large
            raise CheckFailed("a peak the check can measure (compute in this thread)", f"{peak:,} B",
                              "compute the loss and its backward directly in the function, not in another thread.")
        bound = inputs + CHUNK_LOGIT_ALLOWANCE * 4 * chunk * vocab
        if peak > bound:
            raise CheckFailed(f"a peak of at most {bound:,} B ({what}; all the FP32 logits are {full:,} B)",
                              f"{peak:,} B", "a loop over chunks still keeps every chunk's logits for "
                              "backward: recompute each chunk in backward (activation checkpointing per chunk).")


def check_chunked_loss(chunked_loss: Callable[..., torch.Tensor]) -> Verdict:
    """Exercise 9.5: a chunked linear-cross-entropy with the full loss's value and gradients and a chunk-sized peak."""
    return run_check("9.5", lambda: expect_chunked_loss(chunked_loss, [(1024, 64, 8192, 128, 7, 0)]), points=2)
