"""Checks for lab 04 (automatic mixed precision): public cases. Held-out cases live in grading/hidden/ch04.py."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from utils.course.checks.core import CheckFailed, Verdict, expect_reasoning, guarded, observe, run_check
from utils.course.scenes.ch04 import clipped_step_scene
from utils.ledger.architectures import PUBLISHED_PARAMS
from utils.lessons.measure import optimizer_state_bytes, step_peak
from utils.lessons.models import GPT, GPTConfig, mlp


def _answered(value: Any, name: str) -> Any:
    if value is ...:
        raise NotImplementedError(name)
    return value


# 4.1 ------------------------------------------------------------------------------------------------------------
def _peak_normalise(x: torch.Tensor) -> torch.Tensor:
    """A custom op (someone else's kernel, registered with torch.library): each row divided by its largest |value|."""
    return x / x.abs().amax(-1, keepdim=True).clamp_min(1e-3)


if not hasattr(torch.ops.gpumemcourse, "peak_normalise"):  # the grader reloads this module: register once
    torch.library.custom_op("gpumemcourse::peak_normalise", _peak_normalise, mutates_args=()).register_fake(
        lambda x: torch.empty_like(x))


class RetrievalScorer(nn.Module):
    """Someone else's model (a retrieval scorer): ops the chapter did not trace, each output kept by name."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        t: dict[str, torch.Tensor] = {}
        t["proj"] = self.proj(x)
        t["norm_proj"] = self.norm(t["proj"])
        t["norm_input"] = self.norm(x)
        t["scores"] = t["norm_proj"] @ t["norm_proj"].T
        t["probs"] = torch.softmax(t["scores"], dim=-1)
        t["cdf"] = torch.cumsum(t["probs"], dim=-1)
        t["peaked"] = torch.ops.gpumemcourse.peak_normalise(t["proj"])
        t["skip"] = torch.cat([t["proj"], x], dim=-1)
        t["residual"] = t["proj"] + x
        t["confidence"] = torch.prod(torch.sigmoid(t["proj"]), dim=-1)
        t["loss"] = nn.functional.mse_loss(t["proj"], target)
        return t


SCORER_OUTPUTS = ("proj", "norm_proj", "norm_input", "scores", "probs", "cdf", "peaked", "skip", "residual",
                  "confidence", "loss")


def scorer_dtypes_truth(autocast_dtype: torch.dtype, input_dtype: torch.dtype) -> dict[str, torch.dtype]:
    """What CPU autocast actually does: run RetrievalScorer under torch.autocast("cpu", dtype=autocast_dtype) on
    inputs of `input_dtype` (the model's weights stay FP32)."""
    torch.manual_seed(0)
    model = RetrievalScorer(16)
    x, target = torch.randn(6, 16, dtype=input_dtype), torch.randn(6, 16, dtype=input_dtype)
    with torch.autocast("cpu", dtype=autocast_dtype):
        out = model(x, target)
    return {name: out[name].dtype for name in SCORER_OUTPUTS}


def expect_scorer_dtypes(autocast_dtypes: Callable[[torch.dtype, torch.dtype], dict],
                         cases: Sequence[tuple[torch.dtype, torch.dtype]]) -> None:
    """cases: (autocast dtype, input dtype). The learner predicts without running the model under autocast."""
    autocast_dtypes = guarded(autocast_dtypes, scorer_dtypes_truth, RetrievalScorer, torch.autocast,
                              torch.amp.autocast_mode.autocast, torch.set_autocast_enabled)  # switching it on by hand
    for autocast_dtype, input_dtype in cases:
        want = scorer_dtypes_truth(autocast_dtype, input_dtype)
        got = autocast_dtypes(autocast_dtype, input_dtype)
        if not isinstance(got, dict) or set(got) != set(SCORER_OUTPUTS):
            raise CheckFailed(f"a dict with the keys {SCORER_OUTPUTS}", repr(got))
        for name in SCORER_OUTPUTS:
            if got[name] != want[name]:
                raise CheckFailed(f"{name!r} in {want[name]} under CPU autocast to {autocast_dtype} with "
                                  f"{input_dtype} inputs", repr(got[name]),
                                  "CPU autocast casts only its lists: matmul-like ops (linear, matmul) to the "
                                  "autocast dtype, a few ops (prod, mse_loss, other losses) to FP32, cat to the "
                                  "widest input; every other op, a custom op included, runs in whatever dtype its "
                                  "inputs already have, and mixed binary ops follow type promotion.")


def check_autocast_dtypes(autocast_dtypes: Callable[[torch.dtype, torch.dtype], dict]) -> Verdict:
    """Exercise 4.1: predict the dtype of each op of someone else's model under CPU autocast, checked by running it."""
    return run_check("4.1", lambda: expect_scorer_dtypes(autocast_dtypes, [(torch.bfloat16, torch.float32)]),
                     points=1)


# 4.2 ------------------------------------------------------------------------------------------------------------
def reference_bytes_per_param(hidden: int, param_dtype: torch.dtype, autocast_dtype: torch.dtype | None) -> float:
    """Peak bytes per parameter of forward + backward of mlp(64, hidden, 64, depth=2) in `param_dtype`, with AdamW's
    state already created, batch 2, autocast to `autocast_dtype` (None: off). CPU."""
    torch.manual_seed(0)
    net = mlp(64, hidden, 64, depth=2).to(param_dtype)
    opt = torch.optim.AdamW(net.parameters())
    x = torch.randn(2, 64, dtype=param_dtype)

    def forward_backward() -> None:
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = net(x).float().pow(2).mean()
        loss.backward()

    forward_backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    n = sum(p.numel() for p in net.parameters())
    return step_peak(forward_backward, net, opt, warmup=0) / n


def expect_bytes_per_param(bytes_per_param: Callable[..., float], cases: Sequence[tuple]) -> None:
    bytes_per_param = guarded(bytes_per_param, reference_bytes_per_param)
    for hidden, param_dtype, autocast_dtype in cases:
        truth = reference_bytes_per_param(hidden, param_dtype, autocast_dtype)
        got = bytes_per_param(hidden, param_dtype, autocast_dtype)
        if isinstance(got, bool) or not isinstance(got, int | float) or abs(got - truth) > 0.03 * truth:
            raise CheckFailed(f"bytes_per_param({hidden}, {param_dtype}, {autocast_dtype}) within 3% of {truth:.2f}",
                              repr(got), "build the MLP in param_dtype, create AdamW's state with one full step, then "
                              "measure forward + backward only with utils.lessons.measure.step_peak and divide by "
                              "the number "
                              "of parameters.")


MEASURE_CASE = (512, torch.bfloat16, None)
# 4.2's prediction: Llama-3-8B (8,030,261,248 parameters, utils.ledger.architectures.PUBLISHED_PARAMS) trained by
# two recipes chapter 04 did not count, activations aside. At the backward peak (the end of backward) every parameter
# has its weight, its optimizer state and its gradient; autocast's BF16 weight copies are freed layer by layer as
# backward goes, so they are gone by then. Under autocast the weights and gradients are FP32, and an 8-bit AdamW
# (torchao's AdamW8bit) stores each moment as 1-byte codes plus an FP32 scale per block of 256 values; in pure BF16
# with Kahan summation the weight, gradient, both moments and the compensation buffer are all BF16.
PREDICT_PARAMS = PUBLISHED_PARAMS["Llama-3-8B"]
BACKWARD_PEAK_BYTES = {"amp-8bit-adam": 4 + 2 * (1 + 4 / 256) + 4, "pure-bf16-kahan": 2 + 4 + 2 + 2}


def backward_peak_truth(n_params: int = PREDICT_PARAMS) -> dict[str, float]:
    """GiB of parameter-sized tensors at the backward peak of an AdamW step, per recipe."""
    return {recipe: n_params * per / 2**30 for recipe, per in BACKWARD_PEAK_BYTES.items()}


def check_bytes_per_param(prediction: dict, reasoning: str, bytes_per_param: Callable[..., float]) -> Verdict:
    """Exercise 4.2: predict (within 5%) Llama-3-8B's parameter-sized GiB at the backward peak under AMP with 8-bit
    AdamW and under pure BF16 with Kahan summation, then measure bytes per parameter of small MLPs."""

    def body() -> None:
        guess = _answered(prediction, "prediction")
        if not isinstance(guess, dict) or set(guess) != set(BACKWARD_PEAK_BYTES) or any(
                isinstance(v, bool) or not isinstance(v, int | float) for v in guess.values()):
            raise CheckFailed(f"prediction as a dict of GiB with the keys {tuple(BACKWARD_PEAK_BYTES)}", repr(guess))
        expect_reasoning(reasoning, "4.2")
        for recipe, truth in backward_peak_truth().items():
            if abs(guess[recipe] - truth) > 0.05 * truth:
                raise CheckFailed(f"a prediction for {recipe!r} within 5% of the true GiB (the check withholds it)",
                                  f"{guess[recipe]}",
                                  "count Llama-3-8B's parameters from its config (GQA: k and v are 1,024 wide; the "
                                  "128k embedding and head are untied), then what exists per parameter when the "
                                  "last gradient is written: weight, optimizer state and gradient, each in its own "
                                  "dtype and size (8-bit codes and their scales; a Kahan buffer). Are autocast's "
                                  "BF16 weight copies still alive then?")
        expect_bytes_per_param(bytes_per_param, [MEASURE_CASE])

    return run_check("4.2", body, points=2)


# 4.3 ------------------------------------------------------------------------------------------------------------
def reference_clipped_step(model, optimizers, scaler, micro_batches, max_norm) -> float:
    """One FP16 step: gradients accumulated over the micro-batches (mean loss), every optimizer unscaled once, the
    total norm clipped, each optimizer stepped, the scaler updated once."""
    total = 0.0
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss / len(micro_batches)).backward()
        total += loss.item()
    for opt in optimizers:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    return total / len(micro_batches)


def expect_clipped_step(train_step: Callable[..., float], cases: Sequence[tuple]) -> None:
    """cases: (d_model, micro-batches, max_norm, init_scale, seed, steps). The steps run in a scene
    (utils.course.scenes.ch04), once with the learner's step and once with the reference, and the two are compared
    step by step."""
    train_step = guarded(train_step, reference_clipped_step)
    for case in cases:
        d_model, n_micro, max_norm, init_scale, seed, steps = case
        want = clipped_step_scene(reference_clipped_step, *case)
        got = observe(clipped_step_scene, train_step, *case)
        what = f"({n_micro} micro-batches, max_norm {max_norm}, init scale {init_scale:g})"
        for step in range(steps):
            ref_loss, loss = want["losses"][step], got["losses"][step]
            if loss is None or abs(loss - ref_loss) > 1e-3 * abs(ref_loss):
                raise CheckFailed(f"the mean micro-batch loss {ref_loss:.5f} (a float) at step {step} {what}",
                                  got["returned"][step], "return the mean of the micro-batches' losses." if step == 0
                                  else "the previous update differed.")
            for name, p_ref in want["params"][step].items():
                p_you = got["params"][step][name]
                if not torch.allclose(p_ref, p_you, rtol=1e-3, atol=1e-5):
                    raise CheckFailed(f"parameter {name} as a correct step leaves it after step {step} {what}",
                                      f"a max difference of {(p_ref - p_you).abs().max().item():.3g}",
                                      "accumulate the MEAN loss; clipping must see true gradients of BOTH "
                                      "optimizers (unscale_ each once, before clip_grad_norm_); one update() per "
                                      "step, after every optimizer has stepped.")
        if got["scale"] != want["scale"]:
            raise CheckFailed(f"the scaler's scale {want['scale']:g} after {steps} steps {what}",
                              f"{got['scale']:g}", "one scaler.update() per step, not per optimizer.")


def check_clipped_step(train_step: Callable[..., float]) -> Verdict:
    """Exercise 4.3: a colleague's FP16 step with accumulation, clipping and two optimizers, fixed."""
    return run_check("4.3", lambda: expect_clipped_step(train_step, [(32, 3, 100.0, 2.0**12, 1, 3),
                                                                     (32, 2, 0.5, 2.0**14, 0, 4)]), points=3)


# 4.4 ------------------------------------------------------------------------------------------------------------
RECIPE_KEYS = ("autocast_dtype", "grad_scaler", "fp32_precision", "weights")
# AdamW's training state per parameter (weights, gradients, two moments), as exercise 4.4 states it: FP32 weights
# (under autocast or not) 4 + 4 + 8; pure BF16 (weights, gradients and moments in BF16) 2 + 2 + 4.
STATE_BYTES = {"fp32": 16, "bf16": 8}


def reference_recipe(capability: tuple[int, int], n_params: int, memory_bytes: int) -> dict[str, Any]:
    major_minor = tuple(capability)
    if major_minor >= (8, 0):
        recipe = {"autocast_dtype": torch.bfloat16, "grad_scaler": False, "fp32_precision": "tf32"}
    elif major_minor >= (7, 0):
        recipe = {"autocast_dtype": torch.float16, "grad_scaler": True, "fp32_precision": "ieee"}
    else:
        recipe = {"autocast_dtype": None, "grad_scaler": False, "fp32_precision": "ieee"}
    if STATE_BYTES["fp32"] * n_params <= memory_bytes:
        return {**recipe, "weights": torch.float32}
    if major_minor >= (8, 0) and STATE_BYTES["bf16"] * n_params <= memory_bytes:
        return {**recipe, "autocast_dtype": None, "weights": torch.bfloat16}  # the model is BF16: no autocast
    return {**recipe, "weights": None}


def expect_recipes(choose_recipe: Callable[[tuple[int, int], int, int], dict],
                   cases: Sequence[tuple[str, tuple[int, int], int, int]]) -> None:
    """cases: (GPU, compute capability, parameters, memory in bytes)."""
    choose_recipe = guarded(choose_recipe, reference_recipe)
    for gpu, capability, n_params, memory in cases:
        expected = reference_recipe(capability, n_params, memory)
        got = choose_recipe(capability, n_params, memory)
        if not isinstance(got, dict) or set(got) != set(RECIPE_KEYS):
            raise CheckFailed(f"a dict with keys {RECIPE_KEYS}", repr(got))
        where = (f"{n_params / 1e9:g}B parameters on the {gpu} with {memory / 2**30:g} GiB (compute capability "
                 f"{capability[0]}.{capability[1]})")
        for key in RECIPE_KEYS:
            if got[key] != expected[key] or type(got[key]) is not type(expected[key]):
                raise CheckFailed(f"{key} = {expected[key]!r} for {where}", repr(got[key]), RECIPE_HINTS[key])


RECIPE_HINTS = {
    "weights": "FP32 weights need 16 B/param of state, pure BF16 8 B/param and BF16 Tensor Cores; where neither fits, "
               "None.",
    "autocast_dtype": "a model that is BF16 already needs no autocast; otherwise the half format this GPU's Tensor "
                      "Cores run, the one that trains without a scaler where it has both, and None where it has none.",
    "grad_scaler": "which format's gradients underflow without loss scaling is chapter 03's lesson.",
    "fp32_precision": "TF32 wherever the GPU has it, whatever the weights; \"ieee\" where it does not.",
}


def check_recipe(choose_recipe: Callable[[tuple[int, int], int, int], dict]) -> Verdict:
    """Exercise 4.4: a precision recipe from a GPU's compute capability and memory and the model's size."""
    return run_check("4.4", lambda: expect_recipes(choose_recipe, [
        ("T4", (7, 5), 500_000_000, 15 * 2**30), ("A100", (8, 0), 7_000_000_000, 80 * 2**30),
        ("H100", (9, 0), 3_000_000_000, 80 * 2**30), ("T4", (7, 5), 1_500_000_000, 15 * 2**30)]), points=2)


# 4.5 ------------------------------------------------------------------------------------------------------------
OPTIMIZERS: dict[str, Callable[[list], torch.optim.Optimizer]] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps),
    "adagrad": lambda ps: torch.optim.Adagrad(ps),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps),
    "rmsprop-centered": lambda ps: torch.optim.RMSprop(ps, centered=True),
}
RECIPES = ("fp32", "amp-bf16", "pure-bf16")


def reference_training_state(model: torch.nn.Module, optimizer: str, recipe: str) -> int:
    """Parameters + gradients + optimizer state of `model` trained with `optimizer` under `recipe`, measured after
    one real step: "fp32" and "amp-bf16" (autocast: FP32 parameters, gradients and states) or "pure-bf16" (the model
    cast to BF16: everything BF16 except the FP32 step counters)."""
    net = copy.deepcopy(model)
    if recipe == "pure-bf16":
        net = net.to(torch.bfloat16)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = OPTIMIZERS[optimizer](params)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    return (sum(p.nbytes for p in net.parameters()) + sum(p.grad.nbytes for p in params)
            + optimizer_state_bytes(opt))


def expect_training_states(training_state_bytes: Callable, cases: Sequence[tuple[str, torch.nn.Module, str, str]]
                           ) -> None:
    """cases: (model name, model, optimizer, recipe)."""
    training_state_bytes = guarded(training_state_bytes, reference_training_state, optimizer_state_bytes,
                                   *(o for o in (torch.optim.SGD, torch.optim.AdamW, torch.optim.Adam,
                                                 torch.optim.Adagrad, torch.optim.RMSprop)))
    for name, model, optimizer, recipe in cases:
        want = reference_training_state(model, optimizer, recipe)
        got = training_state_bytes(copy.deepcopy(model), optimizer, recipe)
        if got != want:
            raise CheckFailed(f"training_state_bytes({name}, {optimizer!r}, {recipe!r}) = {want:,}", repr(got),
                              "per trainable element: the weight and its gradient, plus the optimizer's buffers "
                              "(momentum 1; Adagrad's sum 1; RMSprop's square average 1, centered adds the gradient "
                              "average; AdamW 2), all in the parameter's dtype; plus a 4-byte FP32 step counter per "
                              "parameter tensor for every optimizer but SGD; frozen parameters have no gradient or "
                              "state; autocast does not change what is stored.")


def check_training_states(training_state_bytes: Callable) -> Verdict:
    """Exercise 4.5: chapter 04's bytes per parameter carried to optimizers it did not show, in FP32, AMP and pure
    BF16, predicted without a step."""

    def body() -> None:
        frozen = mlp(16, 32, 8)
        frozen[0].requires_grad_(False)
        expect_training_states(training_state_bytes, [
            ("an MLP", mlp(16, 32, 8), "adagrad", "fp32"),
            ("an MLP", mlp(16, 32, 8), "rmsprop-centered", "pure-bf16"),
            ("a GPT", GPT(GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=8, vocab_size=40)), "sgd-momentum",
             "amp-bf16"),
            ("an MLP with a frozen first layer", frozen, "adamw", "pure-bf16"),
        ])

    return run_check("4.5", body, points=2)
