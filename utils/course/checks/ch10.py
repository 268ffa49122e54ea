"""Checks for lab 10 (beyond one GPU). The `expect_*` helpers run cases; the grader's hidden cases
(grading/hidden/ch10.py) call them with other layer sizes, schedules, models, GPU counts and budgets."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import utils.ledger.parallel
import utils.ledger.plan
from utils.course.checks.core import CheckFailed, Verdict, guarded, run_check
from utils.ledger.architectures import ArchitectureShape, shape_of_model
from utils.ledger.budget import REPORTED_GIB, usable_budget
from utils.ledger.plan import Choice, costs, memory_of

GIB = 2**30
SCHEDULES = ("gpipe", "1f1b")


def _number(got: Any, what: str) -> float:
    if not isinstance(got, int | float) or isinstance(got, bool):
        raise CheckFailed(what, type(got).__name__, "return a number (an int or a float).")
    return float(got)


# 10.1 ------------------------------------------------------------------------------------------------------------
def reference_stage(layer_bytes: float, n_layer: int, stages: int, micro_batches: int,
                    schedule: str) -> tuple[float, float]:
    """Reference for 10.1: (the first stage's activation bytes at its peak, the fraction of the step a stage idles).
    GPipe runs every micro-batch's forward before any backward: the first stage holds all m micro-batches through
    its L/p layers; 1F1B starts backwards after p forwards: min(p, m). Both fill and drain the pipeline once per
    step: each stage works m of the m + p - 1 slots of the forward pass and of the backward pass."""
    if n_layer % stages:
        raise ValueError(f"n_layer ({n_layer}) must be divisible by stages ({stages})")
    in_flight = micro_batches if schedule == "gpipe" else min(stages, micro_batches)
    return layer_bytes * n_layer / stages * in_flight, (stages - 1) / (micro_batches + stages - 1)


def expect_pipeline_stage(fn: Callable[..., Any], cases: Sequence[tuple[float, int, int, int, str]]) -> None:
    fn = guarded(fn, reference_stage, utils.ledger.parallel.pipeline_layers_held,
                 utils.ledger.parallel.activation_bytes_per_gpu)
    for layer_bytes, n_layer, stages, micro, schedule in cases:
        expected = reference_stage(layer_bytes, n_layer, stages, micro, schedule)
        got = fn(layer_bytes, n_layer, stages, micro, schedule)
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailed("a tuple (activation bytes, idle fraction)", repr(got)[:120])
        held, idle = (_number(g, "a number") for g in got)
        case = f"{layer_bytes:,.0f} B per layer, L = {n_layer}, p = {stages}, m = {micro}, {schedule}"
        if abs(held - expected[0]) > 1e-9 * expected[0] + 1:
            raise CheckFailed(f"{expected[0]:,.0f} B held by the first stage ({case})", f"{held:,.0f} B",
                              "count the micro-batches whose activations are alive when the first backward starts, "
                              "each through L/p layers." if schedule == "gpipe" else
                              "under 1F1B a stage starts backwards after p forwards (or after all m, if fewer).")
        if abs(idle - expected[1]) > 1e-9:
            raise CheckFailed(f"an idle fraction of {expected[1]:.4f} ({case})", f"{idle:.4f}",
                              "draw the schedule: how many slots does a forward pass of m micro-batches through p "
                              "stages take, and in how many of them does one stage work?")


def check_pipeline_stage(pipeline_stage: Callable[..., Any]) -> Verdict:
    """Exercise 10.1: GPipe's and 1F1B's first-stage activations and the pipeline's idle fraction."""
    return run_check("10.1", lambda: expect_pipeline_stage(pipeline_stage, [
        (1.0e9, 80, 4, 16, "gpipe"), (1.0e9, 80, 4, 16, "1f1b"), (3.5e8, 32, 8, 4, "1f1b"),
        (3.5e8, 32, 8, 4, "gpipe"), (2.0e6, 12, 1, 3, "gpipe")]), points=1)


# 10.2 ------------------------------------------------------------------------------------------------------------
def reference_params_per_rank(d_model: int, n_heads: int, n_kv_heads: int, ffn: int, t: int) -> int:
    """Reference for 10.2: one Llama-style layer's parameters on one of t tensor-parallel GPUs: q and o (d x d), k
    and v (d x n_kv x head_dim) and the SwiGLU MLP's gate, up and down (d x ffn) split t ways; the two RMSNorm
    weights (d each) whole on every GPU. t must divide the heads, the key/value heads and ffn."""
    if n_heads % t or n_kv_heads % t or ffn % t:
        raise ValueError(f"t ({t}) must divide n_heads ({n_heads}), n_kv_heads ({n_kv_heads}) and ffn ({ffn})")
    kv = n_kv_heads * (d_model // n_heads)
    return (2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * ffn) // t + 2 * d_model


def expect_params_per_rank(fn: Callable[..., Any], cases: Sequence[tuple[int, int, int, int, int]],
                           bad: Sequence[tuple[int, int, int, int, int]]) -> None:
    fn = guarded(fn, reference_params_per_rank, utils.ledger.plan.block_parameters, utils.ledger.plan.state_share)
    for case in cases:
        expected = reference_params_per_rank(*case)
        got = _number(fn(*case), "a number of parameters")
        if got != expected:
            d, heads, kv, ffn, t = case
            raise CheckFailed(f"{expected:,} parameters per GPU (d {d}, {heads} heads, {kv} key/value heads, ffn "
                              f"{ffn}, t = {t})", f"{got:,.0f}",
                              "k and v are d x (key/value heads x head size); which weights are not split at all?")
    for case in bad:
        try:
            fn(*case)
        except Exception as exc:  # noqa: BLE001 (the grader replays a recorded error as a class of the same name)
            if type(exc).__name__ != "ValueError" or not re.search(r"\bt\b", str(exc)):
                raise CheckFailed("a ValueError that names the argument t",
                                  f"{type(exc).__name__}: {str(exc)[:120]}") from None
        else:
            raise CheckFailed(f"ValueError for t = {case[-1]} with {case[2]} key/value heads", "no error",
                              "a head cannot be split across GPUs: refuse a t that does not divide them.")


def check_params_per_rank(params_per_rank: Callable[..., Any]) -> Verdict:
    """Exercise 10.2: one grouped-query, SwiGLU layer's parameters per tensor-parallel GPU."""
    return run_check("10.2", lambda: expect_params_per_rank(params_per_rank, [
        (4096, 32, 8, 14336, 1), (4096, 32, 8, 14336, 8), (4096, 32, 8, 14336, 2)], [(4096, 32, 8, 14336, 16)]),
        points=1)


# 10.3 ------------------------------------------------------------------------------------------------------------
LAB_MODEL, LAB_SEQ, LAB_GPU, LAB_GPUS, LAB_MICRO = "Llama-2-70B", 4096, "H100 (80 GB)", 32, 16
MAX_IDLE = 0.2  # the pipeline's idle fraction a layout may have (exercise 10.1's (p - 1)/(m + p - 1))


def layout_traffic(shape: ArchitectureShape, choice: Choice) -> float:
    """Bytes one GPU moves per optimizer step under `choice`: data-parallel communication, tensor-parallel and
    pipeline traffic (utils.ledger.plan.costs)."""
    c = costs(shape, choice)
    return c["communication bytes"] + c.get("tensor-parallel bytes", 0.0) + c.get("pipeline bytes", 0.0)


def layouts(shape: ArchitectureShape, n_gpus: int, micro_batches: int) -> list[Choice]:
    """Every layout exercise 10.3 allows: t in 1, 2, 4, 8 (one node), sequence parallelism with t > 1, p stages
    dividing the layers with the pipeline idle at most MAX_IDLE of the step, the rest data-parallel replicas with a
    ZeRO stage, with or without checkpointing."""
    found = []
    for t, p in itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16)):
        if n_gpus % (t * p) or shape.n_layer % p or (p - 1) / (micro_batches + p - 1) > MAX_IDLE:
            continue
        replicas = n_gpus // (t * p)
        for sp, sharding, ck in itertools.product((False, True) if t > 1 else (False,),
                                                  ("none", "zero1", "zero2", "zero3") if replicas > 1 else ("none",),
                                                  (False, True)):
            found.append(Choice(precision="bf16-mixed", checkpointing=ck, accumulation=micro_batches,
                                chunked_loss=1024, tensor_parallel=t, sequence_parallel=sp, pipeline_stages=p,
                                n_gpus=replicas, sharding=sharding))
    return found


def reference_layout(model: str, n_gpus: int, budget_bytes: int, micro_batches: int) -> Choice | None:
    """Reference for 10.3: of the allowed layouts whose ledger fits, one that moves the fewest bytes per GPU."""
    shape = shape_of_model(model, LAB_SEQ)
    fitting = [c for c in layouts(shape, n_gpus, micro_batches) if sum(memory_of(shape, c).values()) <= budget_bytes]
    return min(fitting, key=lambda c: layout_traffic(shape, c)) if fitting else None


def expect_layout(fn: Callable[..., Any], cases: Sequence[tuple[str, int, int, int]]) -> None:
    fn = guarded(fn, reference_layout, layouts, utils.ledger.plan.plan)
    for model, n_gpus, budget, micro in cases:
        shape = shape_of_model(model, LAB_SEQ)
        best = reference_layout(model, n_gpus, budget, micro)
        got = fn(model, n_gpus, budget, micro)
        case = f"{model} on {n_gpus} GPUs, {budget / GIB:.1f} GiB each, {micro} micro-batches"
        if best is None:
            if got is not None:
                raise CheckFailed(f"None: no allowed layout fits ({case})", repr(got)[:160])
            continue
        if not isinstance(got, Choice):
            raise CheckFailed(f"a utils.ledger.plan.Choice ({case})", type(got).__name__,
                              "return Choice(...), or None when no layout fits.")
        if got not in layouts(shape, n_gpus, micro):
            raise CheckFailed(f"one of the layouts the exercise allows ({case})", got.describe(),
                              "bf16-mixed, micro-batch 1, accumulation = micro_batches, chunked loss 1024, AdamW, "
                              "t in 1-8, p dividing the layers with the pipeline idle at most 20% of the step, "
                              "t x p x replicas = n_gpus.")
        total = sum(memory_of(shape, got).values())
        if total > budget:
            raise CheckFailed(f"a ledger within {budget / GIB:.1f} GiB per GPU ({case})",
                              f"{total / GIB:.1f} GiB ({got.describe()})")
        if layout_traffic(shape, got) > layout_traffic(shape, best) * (1 + 1e-9):
            raise CheckFailed(f"the fewest bytes moved per GPU per step among fitting layouts ({case}): "
                              f"{layout_traffic(shape, best) / 1e9:,.1f} GB",
                              f"{layout_traffic(shape, got) / 1e9:,.1f} GB ({got.describe()})",
                              "compare every fitting layout's traffic: a smaller t moves fewer activations per layer.")


def check_layout(choose_layout: Callable[..., Any]) -> Verdict:
    """Exercise 10.3: a layout of N GPUs that fits the budget and moves the fewest bytes per GPU."""
    budget = usable_budget(int(REPORTED_GIB[LAB_GPU] * GIB))
    return run_check("10.3", lambda: expect_layout(choose_layout, [(LAB_MODEL, LAB_GPUS, budget, LAB_MICRO)]),
                     points=2)


# 10.4 ------------------------------------------------------------------------------------------------------------
def reference_fsdp2_traffic(n_params: int, param_bytes: int, reduce_bytes: int, n_gpus: int, micro_batches: int,
                            reshard_after_forward: bool, sync_every_micro_batch: bool) -> float:
    """Reference for 10.4: bytes one GPU sends per optimizer step under FSDP2 (every layer wrapped, the root holding no
    parameter, parameters resharded after every backward: FSDP2's default), with ring collectives ((N - 1)/N of the
    data each). Every micro-batch's forward all-gathers the weights at `param_bytes` (MixedPrecisionPolicy's
    param_dtype); its backward gathers them again only where `reshard_after_forward` freed them; gradients are
    reduce-scattered at `reduce_bytes` (reduce_dtype) after every micro-batch, or, with gradient sync off until the
    last (`set_requires_gradient_sync(False)`), once. torch 2.13: torch/distributed/fsdp/_fully_shard/_fully_shard.py
    (`reshard_after_forward`, `set_requires_gradient_sync`, `set_reshard_after_backward`) and _fsdp_api.py
    (`MixedPrecisionPolicy`)."""
    ring = (n_gpus - 1) / n_gpus
    gathers = micro_batches * (2 if reshard_after_forward else 1)
    reduces = micro_batches if sync_every_micro_batch else 1
    return ring * n_params * (gathers * param_bytes + reduces * reduce_bytes)


def expect_fsdp2_traffic(fn: Callable[..., Any], cases: Sequence[tuple[int, int, int, int, int, bool, bool]]) -> None:
    fn = guarded(fn, reference_fsdp2_traffic, utils.ledger.plan.costs)
    for case in cases:
        expected = reference_fsdp2_traffic(*case)
        got = _number(fn(*case), "a number of bytes")
        if abs(got - expected) > 1e-9 * expected + 1:
            n, gather, reduce, gpus, micro, reshard, sync = case
            raise CheckFailed(f"{expected:,.0f} B per GPU per step ({n:,} parameters gathered at {gather} B and "
                              f"reduced at {reduce} B, {gpus} GPUs, {micro} micro-batches, reshard_after_forward="
                              f"{reshard}, gradient sync on every micro-batch: {sync})", f"{got:,.0f} B",
                              "which collectives does each switch remove, and at which width does each run?")


def check_fsdp2_traffic(fsdp2_traffic: Callable[..., Any]) -> Verdict:
    """Exercise 10.4: a colleague's count of FSDP2's communication per optimizer step, fixed."""
    return run_check("10.4", lambda: expect_fsdp2_traffic(fsdp2_traffic, [
        (7_000_000_000, 2, 4, 8, 16, True, True), (7_000_000_000, 2, 4, 8, 16, False, True),
        (7_000_000_000, 2, 4, 8, 16, True, False), (1_000_000, 4, 4, 2, 1, True, True),
        (1_000_000, 2, 2, 1, 8, True, True)]), points=1)
