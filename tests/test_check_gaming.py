"""No check can be gamed: every `check_*` of utils/course/checks/ is handed three submissions that must NOT pass:

- `None` (a check's reference path must never be reachable from a learner's value);
- a wrapped reference: an answer that returns the reference's result by calling the check module's own reference
  (or the course's utility the reference measures with);
- the library's own implementation of what the exercise asks the learner to write (torch.amp.GradScaler, the
  course's estimator, planner or OOM-safe search, torch's dtype casts for a bit-level exercise, peft for LoRA).

Where a submission does not exist (the reference is an inline formula with nothing to call) or where using the
library is the point of the exercise, ALLOWED names it with the reason. COURSE_CHECKS_STRICT is unset here, so a
check returns its verdict instead of raising.
"""

from __future__ import annotations

import inspect
import math
import struct
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from utils.course.checks import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, warmup
from utils.course.checks.protocol import STRICT_ENV

MODULES = (warmup, ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10)
# a reasoning that names every prediction's quantities (utils.course.checks.core.REASONING_TERMS), so that what is
# tested is the prediction and the function, not the reasoning
WORDS = ("Per layer and token, the bytes of weights, gradients and Adam moments per parameter; the scale, amax and "
         "standard deviation of the E4M3 weights, flushed to zero; segments of blocks saved; eps and k in the update; "
         "the rank of each LoRA adapter on the attention matrices; a view or a copy of the storage.")

# (check name, submission kind) -> why that submission is not tested.
ALLOWED: dict[tuple[str, str], str] = {
    ("check_packed_bytes", "wrapped reference"): "the reference is the packing formula itself, no measurement",
    ("check_read_run", "library"): "torch has no reader of a run's memory_stats() trend",
    ("check_packed_bytes", "library"): "torch has no packed-size helper for an arbitrary bit width",
    ("check_saved_timeline", "library"): "torch has no saved-bytes timeline of backward (utils.lessons.measure's "
                                         "total, the course's own, is watched)",
    ("check_format_bytes", "wrapped reference"): "the expected strings are literals",
    ("check_format_bytes", "library"): "torch has no byte formatter",
    ("check_new_storage_bytes", "wrapped reference"): "the expected values are literals",
    ("check_new_storage_bytes", "library"): "torch has no allocation counter on the CPU",
    ("check_checkpoint_decoder", "library"): "the point: the exercise asks for torch.utils.checkpoint",
    ("check_fixed_checkpoint", "wrapped reference"): "the reference is the un-checkpointed block",
    ("check_vit_checkpoint", "library"): "the point: the fix is torch.utils.checkpoint with the right arguments",
    ("check_weighted_accumulation", "wrapped reference"): "the reference is one big-batch backward, not a function",
    ("check_weighted_accumulation", "library"): "torch has no accumulation helper",
    ("check_token_normalised", "library"): "the point: the fix passes num_items_in_batch to transformers' own loss",
    ("check_loop", "library"): "the point: the exercise's loop uses torch.amp.GradScaler and a scheduler",
    ("check_clipped_step", "library"): "the point: the exercise's step uses torch.amp.GradScaler",
    ("check_moe_accumulation", "library"): "the point: the exercise's step uses torch.amp.GradScaler",
    ("check_adam_prediction", "library"): "the count is a closed form (a normal CDF); no library computes it",
    ("check_finetune", "library"): "torch has no fine-tuning loop that frees the logits; transformers' Trainer "
                                   "would not run the check's model, optimizer and batches",
    ("check_lora_prediction", "library"): "the point: the exercise measures its count with peft's adapters",
    ("check_features_fixed", "library"): "torch has no feature-collecting training loop",
    ("check_leak_fixed", "library"): "torch has no leak-free training loop",
    ("check_no_leak", "library"): "torch has no leak-free training loop",
}


def _dtypes_by_running(autocast_dtype: torch.dtype, input_dtype: torch.dtype) -> dict:
    model = ch04.RetrievalScorer(16)
    with torch.autocast("cpu", dtype=autocast_dtype):
        out = model(torch.randn(6, 16, dtype=input_dtype), torch.randn(6, 16, dtype=input_dtype))
    return {name: t.dtype for name, t in out.items()}


def _adam_bytes_by_running(model: nn.Module, batch: tuple, amsgrad: bool) -> int:
    opt = torch.optim.Adam(model.parameters(), amsgrad=amsgrad)
    model(*batch).float().sum().backward()
    opt.step()
    return sum(t.nbytes for s in opt.state.values() for t in s.values())


def _mx_by_reference(t: torch.Tensor, block: int, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    e = ch08.mx_exponents(t.reshape(-1, block).float(), rounding)
    deq = ch08.reference_mx_dequantize(t, block, rounding).reshape(-1, block)
    return (deq / 2.0**e).to(torch.float8_e4m3fn).reshape(t.shape), (e + 127).to(torch.uint8).flatten()


def _llama_plan_by_transformers(cfg: dict) -> dict:
    """Hugging Face's LlamaForCausalLM built from a config on the meta device, its parameters counted."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=cfg["d_model"], num_hidden_layers=cfg["n_layer"],
                         num_attention_heads=cfg["n_head"], num_key_value_heads=cfg["n_kv_head"],
                         intermediate_size=cfg["ffn_hidden"], vocab_size=cfg["vocab"],
                         tie_word_embeddings=cfg["tied"])
    with torch.device("meta"):
        params = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    return {"params": params, "state_bytes": 16 * params, "gpus_80gb": -(-16 * params // (80 * 10**9))}


def _mx_element_by_torchao(code: int, exp_bits: int, man_bits: int) -> float:
    """torchao's unpacked-minifloat decoder, the library implementation of exercise 2.6."""
    from torchao.prototype.custom_fp_utils import _floatx_unpacked_to_f32

    return _floatx_unpacked_to_f32(torch.tensor([code], dtype=torch.uint8), exp_bits, man_bits).item()


def _swiglu_by_measuring(tokens: int, d: int, ffn: int, mode: str) -> int:
    """The check's own block measured on the meta device: the measurement the exercise asks to replace by a formula."""
    from utils.lessons.measure import saved_activation_bytes

    with torch.device("meta"):
        block = ch05.SwiGLUBlock(d, ffn)
        x = torch.randn(tokens, d, requires_grad=True)
    return saved_activation_bytes(lambda t: block(t, mode), x)


def _training_state_by_stepping(model: nn.Module, optimizer: str, recipe: str) -> int:
    """One real step of torch's optimizer, its state summed: the measurement the exercise asks to predict."""
    net = model.to(torch.bfloat16) if recipe == "pure-bf16" else model
    params = [p for p in net.parameters() if p.requires_grad]
    opt = ch04.OPTIMIZERS[optimizer](params)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    state = sum(t.nbytes for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    return sum(p.nbytes for p in net.parameters()) + sum(p.grad.nbytes for p in params) + state


def _plan_by_planner(cfg: Any, budget: int, effective: int) -> Any:
    """utils.ledger.plan's planner for the Choice; the evaluation batch by the check's own measurement."""
    from utils.ledger.gpt import shape_of
    from utils.ledger.plan import plan

    choice = plan(shape_of(cfg), budget, effective, allow_offload=False).choice
    sizes = (1, 2, 4, 8, 16, 32, 64)
    return choice, max([1, *(b for b, peak in zip(sizes, ch09.eval_peaks(cfg, choice, sizes), strict=True)
                             if peak <= budget)])


def _oom_search_by_library(step: Callable, optimizer: Any, effective: int, limit: int) -> tuple[int, int]:
    """utils.lessons.profiling's search and utils.lessons.oom's safe step, over the divisors (one retry each)."""
    from utils.lessons.oom import run_step_oom_safe
    from utils.lessons.profiling import largest_fitting

    sizes = [d for d in range(1, limit + 1) if effective % d == 0]

    def fits(i: int) -> bool:
        return run_step_oom_safe(step, optimizer, sizes[i - 1]).ok or run_step_oom_safe(step, optimizer,
                                                                                          sizes[i - 1]).ok

    best = largest_fitting(fits, limit=len(sizes))
    return (sizes[best - 1], effective // sizes[best - 1]) if best else (0, 0)


def _largest_batch_by_measuring(cfg: Any, budget: int) -> int:
    from utils.lessons.profiling import largest_fitting

    return largest_fitting(lambda b: ch01.measured_peak(cfg, b) <= budget, limit=256)


def _micro_plan_by_estimator(cfg: Any, batch: int, budget: int) -> int | None:
    return ch06.fewest_micro_batches(cfg, batch, budget)


def _kept_by_library(cfg: dict, seq_len: int) -> int:
    """The kept graph measured instead of counted: LlamaStyle built on the meta device, its graph walked."""
    return ch07.meta_kept_loss_bytes(cfg, seq_len)


def _delayed_by_chapter_steps(tensors, fmt, margin, history_len, algo) -> list:
    """The chapter's one-step DelayedScaling (the check module's copy) applied step after step."""
    history: list[float] = []
    rows = []
    for t in tensors:
        scale, clipped = ch08.reference_scale_and_clipped(history[-history_len:], t, fmt, margin, algo)
        rows.append((scale, clipped, 0))
        history.append(t.abs().max().item())
    return rows


def _lora_block_by_measuring(batch, seq_len, d_model, n_head, rank) -> int:
    """The course's own measurement of the course's LoRA block (big shapes would not run; the guard stops it)."""
    from utils.lessons.measure import saved_activation_bytes

    block = ch01.lora_block(d_model, n_head, seq_len, rank)
    return saved_activation_bytes(block, torch.randn(batch, seq_len, d_model, requires_grad=True))


def _block_formula_by_measuring(batch, seq_len, d_model, n_head, attention, precision) -> int:
    """The parallel block measured by the course's own counter (big shapes would not run; the guard stops it)."""
    from utils.lessons.measure import saved_activation_bytes

    block = ch01.ParallelBlock(ch01.GPTConfig(n_layer=1, d_model=d_model, n_head=n_head, seq_len=seq_len,
                                              attention=attention))
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16-mixed"):
        return saved_activation_bytes(block, torch.randn(batch, seq_len, d_model, requires_grad=True))


def _zero_by_library(n: int, stage: int, gpus: int, optimizer: str) -> float:
    """The packaged ZeRO ledger (the paper's 2 + 2 + 12), corrected to the lab's FP32 gradients and its optimizer."""
    from utils.ledger.plan import zero_bytes_per_gpu

    smaller_moments = 8 - ch09.MOMENT_BYTES[optimizer]
    return (zero_bytes_per_gpu(n, stage, gpus, accounting="zero-paper") + 2 * n / (gpus if stage >= 2 else 1)
            - smaller_moments * n / (gpus if stage >= 1 else 1))


def _big_batch_in_one_forward(model: nn.Module, micro_batches: list) -> None:
    """Lab 6.1's reference (one backward of the whole batch's loss), reached by concatenating the micro-batches."""
    model(**{key: torch.cat([b[key] for b in micro_batches]) for key in micro_batches[0]}).loss.backward()


def _changed_by_reference(n: float, k: int, eps: float, mu: float, sigma: float, change: float) -> float:
    return ch06.params_changed_truth(n, k, eps, mu, sigma, change)


# check name -> (args for the "wrapped reference" submission, args for the "library" submission); a None entry is
# in ALLOWED. A prediction exercise gets the true prediction and a long reasoning, so its measurement is what is
# tested.
def _submissions() -> dict[str, tuple[Any, Any]]:
    from utils.lessons.formats import decode
    from utils.lessons.measure import saved_activation_bytes

    to16 = lambda code: torch.tensor(code, dtype=torch.int32).to(torch.int16).view(torch.float16).item()  # noqa: E731
    pred = {
        "check_block_prediction": ch01.block_prediction_truth(),
        "check_zero_fraction": ch02.reference_flushed_model(ch02.LLAMA8B_LINEAR_WEIGHTS, "e4m3"),
        "check_flushed": ch03.reference_prediction(ch03.LLAMA8B_PARAMS, ch03.PREDICT_MEAN, ch03.PREDICT_SD),
        "check_bytes_per_param": ch04.backward_peak_truth(),
        "check_optimal_segments": ch05.predicted_segments_truth(),
        "check_adam_prediction": ch06.params_changed_truth(*ch06.PREDICT_CASE),
        "check_kept_graph": ch07.reference_kept_loss_bytes(ch07.LLAMA8B, ch07.PREDICT_SEQ),
        "check_mx_bytes": 7_197_425_664,
        "check_lora_prediction": ch09.llama_lora_truth(**ch09.LLAMA8B_LORA),
        "check_new_storage_bytes": 512 * 256 * 2,
    }
    p = {k: (v, WORDS) for k, v in pred.items()}
    return {
        "check_packed_bytes": (None, None),
        "check_saved_state_bytes": ((lambda state: warmup.written_bytes(state),), (_saved_by_torch_save,)),
        "check_format_bytes": (None, None),
        "check_new_storage_bytes": (None, None),
        "check_adam_state_bytes": ((lambda m, b, a: ch01.adam_truth(m, b, a),), (_adam_bytes_by_running,)),
        "check_saved_timeline": ((lambda fn, *a: ch01.saved_timeline_truth(fn, *a),), None),
        "check_block_prediction": ((*p["check_block_prediction"], lambda *s: ch01.block_truth(*s)),
                                   (*p["check_block_prediction"], lambda b, t, d, h: saved_activation_bytes(
                                       ch01.ParallelBlock(ch01.GPTConfig(n_layer=1, d_model=d, n_head=h, seq_len=t)),
                                       torch.randn(b, t, d, requires_grad=True)))),
        "check_block_formula": ((lambda *c: ch01.block_formula_truth(*c),), (_block_formula_by_measuring,)),
        "check_llama_plan": ((lambda cfg: ch01.llama_plan_truth(cfg),), (_llama_plan_by_transformers,)),
        "check_lora_block": ((lambda *c: ch01.lora_block_formula(*c),), (_lora_block_by_measuring,)),
        "check_no_leak": ((lambda model, train, val, steps: ch01.reference_losses(model.cfg, steps, 0),), None),
        "check_largest_batch": ((_largest_batch_by_measuring,), (_largest_batch_by_measuring,)),
        "check_decode_fp16": ((lambda c: decode(c, "fp16"),), (to16,)),
        "check_round_to_format": ((lambda x, e, m: ch02.reference_round_tensor(x, e, m),), (_round_by_torch_cast,)),
        "check_mx_element": ((lambda c, e, m: ch02.reference_mx_element(c, e, m),), (_mx_element_by_torchao,)),
        "check_smallest_kept_update": ((lambda w, f: ch02._reference_kept_update(w, f),),
                                       (lambda w, f: ch02._reference_kept_update(w, f),)),
        "check_zero_fraction": ((*p["check_zero_fraction"], lambda t, f: ch02.reference_zero_fraction(t, f)),
                                (*p["check_zero_fraction"], lambda t, f: ch02.reference_zero_fraction(t, f))),
        "check_block_quantize": ((lambda t, f, b: ch02.reference_quantize_blocks(t, f, b), _dequantize_blocks),
                                 (_torchao_quantize_blocks, _dequantize_blocks)),
        "check_flushed": ((*p["check_flushed"], lambda v, s: ch03.reference_flushed(v, s)),
                          (*p["check_flushed"], lambda v, s: ch03.reference_flushed(v, s))),
        "check_scaler": ((ch03._GradScalerReference,), (torch.amp.GradScaler,)),
        "check_window": ((lambda c, lo, m: ch03.reference_window(c, lo, m),),
                         (lambda c, lo, m: ch03.reference_window(c, lo, m),)),
        "check_format_plan": ((lambda g, m, f: ch03.reference_format_plan(g, m, f),),
                              (lambda g, m, f: ch03.reference_format_plan(g, m, f),)),
        "check_loop": ((lambda *a: ch03._reference_loop(*a),), None),
        "check_autocast_dtypes": ((lambda a, i: ch04.scorer_dtypes_truth(a, i),), (_dtypes_by_running,)),
        "check_bytes_per_param": ((*p["check_bytes_per_param"], lambda *c: ch04.reference_bytes_per_param(*c)),
                                  (*p["check_bytes_per_param"], lambda *c: ch04.reference_bytes_per_param(*c))),
        "check_clipped_step": ((lambda *a: ch04.reference_clipped_step(*a),), None),
        "check_training_states": ((lambda m, o, r: ch04.reference_training_state(m, o, r),),
                                  (_training_state_by_stepping,)),
        "check_recipe": ((lambda c, n, m: ch04.reference_recipe(c, n, m),),
                         (lambda c, n, m: ch04.reference_recipe(c, n, m),)),
        "check_checkpoint_decoder": ((lambda *a: ch05.plain_decoder(*a),), None),
        "check_optimal_segments": ((*p["check_optimal_segments"], lambda *c: ch05.best_segments(*c)[0]),
                                   (*p["check_optimal_segments"], lambda *c: ch05.best_segments(*c)[0])),
        "check_schedule": ((_schedule_by_reference,), (_schedule_by_reference,)),
        "check_swiglu": ((lambda *a: ch05.swiglu_truth(*a), lambda *a: ch05.cheapest_mode_truth(*a)),
                         (_swiglu_by_measuring, lambda *a: ch05.cheapest_mode_truth(*a))),
        "check_fixed_checkpoint": (None, (lambda block, x: torch.utils.checkpoint.checkpoint(
            block, x, use_reentrant=False),)),
        "check_vit_checkpoint": ((lambda vit, images: ch05.reference_vit_forward(vit, images),), None),
        "check_token_normalised": ((_big_batch_in_one_forward,), None),
        "check_adam_prediction": ((*p["check_adam_prediction"], _changed_by_reference), None),
        "check_moe_accumulation": ((lambda *a: ch06._moe_reference(*a),), None),
        "check_weighted_accumulation": (None, None),
        "check_micro_plan": ((_micro_plan_by_estimator,), (_micro_plan_by_estimator,)),
        "check_read_run": ((lambda s: ch07.run_truth(s),), None),
        "check_kept_graph": ((*p["check_kept_graph"], lambda c, s: ch07.reference_kept_loss_bytes(c, s)),
                             (*p["check_kept_graph"], _kept_by_library)),
        "check_leak_fixed": ((lambda m, o, b: ch07.reference_train_and_log(m, o, b),), None),
        "check_features_fixed": ((lambda m, o, b: ch07.reference_train_with_features(m, o, b),), None),
        "check_micro_batch_plan": ((lambda s, o, e, lim: ch07.micro_plan_truth(2**20, e, lim),),
                                   (_oom_search_by_library,)),
        "check_allocator_replay": ((lambda events: ch07.allocator_truth(events),), (_replay_by_allocator_model,)),
        "check_delayed_scaling": ((lambda *a: ch08.reference_delayed_run(*a),), (_delayed_by_chapter_steps,)),
        "check_mx_bytes": ((*p["check_mx_bytes"], _mx_by_reference), (*p["check_mx_bytes"], _mx_by_reference)),
        "check_roundtrip": ((lambda t, f: ch08.reference_roundtrip(t, f),), (_torchao_roundtrip,)),
        "check_fp8_plan": ((lambda c, v: ch08.reference_fp8_plan(c, v),),
                           (lambda c, v: ch08.reference_fp8_plan(c, v),)),
        "check_model_states": ((lambda *a: ch09.states_per_gpu(*a),), (_zero_by_library,)),
        "check_lora_prediction": ((*p["check_lora_prediction"], lambda c, r: ch09.lora_attention_count(c, r)), None),
        "check_finetune": ((lambda m, o, t, e: ch09.reference_finetune(m, o, t, e),), None),
        "check_plan": ((_plan_by_planner,), (_plan_by_planner,)),
        "check_chunked_loss": ((lambda h, w, t, c: torch.nn.functional.cross_entropy(h @ w.t(), t, ignore_index=-100),),
                               (_chunked_loss_by_library,)),
        "check_pipeline_stage": ((lambda *a: ch10.reference_stage(*a),), (_stage_by_library,)),
        "check_params_per_rank": ((lambda *a: ch10.reference_params_per_rank(*a),), (_params_by_library,)),
        "check_layout": ((lambda *a: ch10.reference_layout(*a),), (_layout_by_planner,)),
        "check_fsdp2_traffic": ((lambda *a: ch10.reference_fsdp2_traffic(*a),), (_fsdp2_traffic_by_costs,)),
    }


def _stage_by_library(layer_bytes: float, n_layer: int, stages: int, micro: int, schedule: str) -> tuple:
    """Lab 10.1 through utils.ledger.parallel's pipeline ledger (the package doing the exercise's work)."""
    import utils.ledger.parallel

    in_flight = micro if schedule == "gpipe" else min(stages, micro)
    held = layer_bytes * utils.ledger.parallel.pipeline_layers_held(n_layer, stages) * in_flight / stages
    return held, (stages - 1) / (micro + stages - 1)


def _params_by_library(d: int, heads: int, kv_heads: int, ffn: int, t: int) -> int:
    """Lab 10.2 through utils.ledger.plan.block_parameters (the package's layer count)."""
    import utils.ledger.plan
    from utils.ledger.gpt import TransformerShape

    return utils.ledger.plan.block_parameters(TransformerShape(1, d, heads, 1, 1)) // t


def _layout_by_planner(model: str, n_gpus: int, budget: int, micro: int) -> Any:
    """Lab 10.3 through the course's planner."""
    import utils.ledger.plan
    from utils.ledger.architectures import shape_of_model

    return utils.ledger.plan.plan(shape_of_model(model, 4096), budget, micro, n_gpus=n_gpus).choice


def _fsdp2_traffic_by_costs(n_params: int, param_bytes: int, reduce_bytes: int, n_gpus: int, micro: int,
                            reshard: bool, sync: bool) -> float:
    """Lab 10.4 through utils.ledger.plan.costs' communication line (ZeRO-3 at its one width)."""
    import utils.ledger.plan
    from utils.ledger.gpt import TransformerShape

    choice = utils.ledger.plan.Choice(precision="bf16-mixed", accumulation=micro, n_gpus=n_gpus,
                                      sharding="zero3" if n_gpus > 1 else "none")
    return utils.ledger.plan.costs(TransformerShape(1, 64, 1, 1, 1), choice)["communication bytes"]


def _saved_by_torch_save(state: dict) -> int:
    """torch.save itself into memory, its archive's data records summed: the library doing the exercise's work."""
    import io
    import zipfile

    buffer = io.BytesIO()
    torch.save(state, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return sum(i.file_size for i in archive.infolist() if "/data/" in i.filename and "." not in i.filename)


def _torchao_quantize_blocks(t: torch.Tensor, fmt: str, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block scales, the cast by torchao's saturating FP8 cast."""
    from torchao.float8.float8_utils import to_fp8_saturated

    dtype = ch02.FP8[fmt]
    k = t.shape[-1]
    nb = -(-k // block)
    blocks = torch.nn.functional.pad(t.float(), (0, nb * block - k)).reshape(*t.shape[:-1], nb, block)
    amax = blocks.abs().amax(dim=-1)
    scales = torch.where(amax > 0, torch.finfo(dtype).max / amax, torch.ones_like(amax))
    q = to_fp8_saturated(blocks * scales.unsqueeze(-1), dtype)
    return q.reshape(*t.shape[:-1], nb * block)[..., :k], scales


def _dequantize_blocks(q: torch.Tensor, scales: torch.Tensor, block: int) -> torch.Tensor:
    return q.float() / scales.repeat_interleave(block, dim=-1)[..., : q.shape[-1]]


def _round_by_torch_cast(x: torch.Tensor, exp_bits: int, man_bits: int) -> torch.Tensor:
    """torch's own rounding: a clamp and a cast to the torch dtype of that format (E5M2, FP16, BF16)."""
    dtype = {(5, 2): torch.float8_e5m2, (5, 10): torch.float16, (8, 7): torch.bfloat16}.get((exp_bits, man_bits),
                                                                                          torch.float32)
    fmax = torch.finfo(dtype).max
    return x.clamp(-fmax, fmax).to(dtype).float()


def _torchao_roundtrip(t: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    """Lab 8.3's rowwise round trip with torchao's saturated FP8 cast."""
    from torchao.float8.float8_utils import to_fp8_saturated

    amax = t.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, torch.finfo(fmt).max / amax, torch.ones_like(amax))
    return to_fp8_saturated(t * scale, fmt).float() / scale


def _schedule_by_reference(depth: int, block_bytes: int, input_bytes: int, budget: int) -> list[int] | None:
    rest = ch05.best_recompute(depth, block_bytes, input_bytes, budget)
    if rest is None:
        return None
    for longest in range(1, depth + 1):
        last = depth - rest
        if last > longest:
            continue
        n = -(-rest // longest) if rest else 0
        schedule = [longest] * n + [last]
        schedule[0] -= sum(schedule) - depth if n else 0
        if all(s >= 1 for s in schedule) and ch05.schedule_peak(schedule, block_bytes, input_bytes) <= budget:
            return schedule
    return None


def _replay_by_allocator_model(events: list) -> dict:
    from utils.lessons.allocator_model import CachingAllocatorModel  # chapter 07's own replay of the rules

    model, handles = CachingAllocatorModel(2**50), {}
    for event in events:
        if event[0] == "alloc":
            handles[event[1]] = model.malloc(event[2])
        else:
            model.free(handles.pop(event[1]))
    held = {"allocated": model.allocated, "reserved": model.reserved}
    model.empty_cache()
    return held | {"reserved_after_empty_cache": model.reserved}


def _chunked_loss_by_library(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                             chunk: int) -> torch.Tensor:
    from utils.lessons.chunked_loss import chunked_cross_entropy

    return chunked_cross_entropy(hidden, weight, targets, chunk)


def _all_checks() -> list[tuple[str, Callable]]:
    return [(name, fn) for module in MODULES for name, fn in vars(module).items()
            if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__]


def _nones(fn: Callable) -> tuple:
    """None for every exercise argument; a prediction exercise gets a real prediction and reasoning, so that its
    None is the answer function's."""
    names = list(inspect.signature(fn).parameters)
    if names[:2] == ["prediction", "reasoning"]:
        return (1, WORDS, *([None] * (len(names) - 2)))
    return (None,) * len(names)


CASES = [(name, kind) for name, _ in _all_checks() for kind in ("None", "wrapped reference", "library")]


def test_every_check_has_submissions() -> None:
    names = {name for name, _ in _all_checks()}
    assert names == set(_submissions()), names ^ set(_submissions())
    for (name, kind), reason in ALLOWED.items():
        assert name in names and kind in ("wrapped reference", "library") and len(reason) > 20, (name, kind)


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_gamed_submission_does_not_pass(name: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)
    check = dict(_all_checks())[name]
    if kind == "None":
        args = _nones(check)
    else:
        if (name, kind) in ALLOWED:
            pytest.skip(ALLOWED[(name, kind)])
        args = _submissions()[name][0 if kind == "wrapped reference" else 1]
        assert args is not None, f"{name}: a {kind} submission is missing and not in ALLOWED"
    verdict = check(*args)
    assert verdict.status != "passed", f"{name} passed a {kind} submission: {verdict}"


def test_own_work_sees_a_renamed_reference() -> None:
    from utils.course.checks.core import CheckFailed, own_work

    alias = ch03.reference_flushed
    with pytest.raises(CheckFailed, match="reference_flushed"):
        with own_work(ch03.reference_flushed):
            alias(torch.ones(3), 1.0)
    with own_work(ch03.reference_flushed):
        math.sqrt(struct.calcsize("e"))  # unrelated calls are fine


def test_own_work_sees_a_format_made_without_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review 34c, A3: 2.1 decoded by `.half()` and an int16 bit view (no call names float16) passed; the dtype
    watch now sees a call that takes or makes a tensor of a watched format."""
    from utils.course.checks import ch02
    from utils.course.checks.core import CheckFailed, own_work

    def decode(code: int) -> float:
        t = torch.empty(1).half()
        t.view(torch.int16).fill_(code - 2**16 if code >= 2**15 else code)
        return t.item()

    with pytest.raises(CheckFailed, match="float16"):
        with own_work(dtypes=(torch.float16,)):
            decode(0x3C00)
    monkeypatch.delenv(STRICT_ENV, raising=False)  # the verdict itself, not the strict run's AssertionError
    assert "float16" in ch02.check_decode_fp16(decode).message
    with own_work(dtypes=(torch.float16,)):
        torch.ones(2).sum()  # FP32 work is fine


def test_own_work_sees_a_process_started_by_the_answer() -> None:
    """Review 34c, A5: an answer that forked and ran the library in the child (0.2, 1.1) or in a subprocess was not
    seen, since the watch lives in the calling process; starting a process inside the block now fails it."""
    import os
    import subprocess
    import sys

    from utils.course.checks.core import CheckFailed, own_work

    def forked() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return 0

    with pytest.raises(CheckFailed, match="fork"):
        with own_work(ch03.reference_flushed):
            forked()
    with pytest.raises(CheckFailed, match="fork_exec"):
        with own_work(ch03.reference_flushed):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    forked()  # outside a watch, a process is the learner's business


def test_the_graders_own_fork_is_not_the_learners() -> None:
    """The grader's fork that answers a batch of tensor calls (grading/runner.py) runs inside the check's watch; it
    is not reported as the learner's process."""
    from grading.runner import _forked_each
    from utils.course.checks.core import own_work

    with own_work(ch03.reference_flushed):
        replies = _forked_each(lambda t: float(t.sum()), [((torch.ones(3),), {})])
    assert replies[0].get("value") == 3.0, replies


def test_own_work_sees_a_copy_of_the_reference_with_its_strings_changed() -> None:
    """Review 34c, A4: 2.2's reference read from disk and run with its docstrings changed was 'the learner's own'."""
    from pathlib import Path

    from utils.course.checks import ch02
    from utils.course.checks.core import CheckFailed, own_work

    source = Path(ch02.__file__).read_text(encoding="utf-8").replace('"""', '""" ')  # the review's cell, as written
    namespace: dict = {"__name__": "my_notes"}
    exec(compile(source, "my_notes.py", "exec"), namespace)  # noqa: S102
    copy = namespace["reference_round"]
    assert copy.__code__ is not ch02.reference_round.__code__
    with pytest.raises(CheckFailed, match="reference_round"):
        with own_work(ch02.reference_round):
            copy(1.0, 5, 10)


def test_own_work_sees_an_answer_reading_the_checks_frames() -> None:
    """Review 34c, A6: a 7.4 answer (judged in the kernel then) read the check's `budget` from the calling frames.
    Reading frames from the learner's code inside a watched call now fails it; Python's own modules reading theirs
    (logging) do not."""
    import inspect
    import logging
    import sys

    from utils.course.checks.core import CheckFailed, own_work

    def peek_caller() -> dict:
        return dict(sys._getframe(1).f_locals)

    def peek_inspect() -> object:
        return inspect.currentframe().f_back

    def peek_threads() -> int:
        return len(sys._current_frames())

    for answer, name in ((peek_caller, "_getframe"), (peek_inspect, "currentframe"), (peek_threads, "_current_frames")):
        with pytest.raises(CheckFailed, match=name):
            with own_work(ch03.reference_flushed):
                answer()
    with own_work(ch03.reference_flushed):
        logging.getLogger("course-test").debug("the logging module reads its caller's frame")
