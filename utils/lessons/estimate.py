"""The traced memory estimator: one training step of any model, run on fake tensors, counted part by part; and
the traced check of the analytic one (`utils.ledger.gpt.transformer_memory`, the course's GPT at any size, without
torch).

`estimate_memory` runs the model's forward under torch's FakeTensorMode: shapes, dtypes and the ops'
choices are real, but no memory is allocated, so it answers for models larger than the machine. It
counts, for one training step:

- params: every parameter in its training dtype (FP32 master weights in the mixed precisions);
- grads: one gradient per trainable parameter (FP32 in the mixed precisions, BF16 in pure BF16);
- optimizer_states: momentum (SGD with momentum) or two moments plus a 4-byte step counter per tensor
  (Adam/AdamW), in the parameter's dtype, for trainable parameters only;
- activations: the bytes autograd saves for backward, counted with the same saved-tensor hooks as
  `utils.lessons.measure.saved_activation_bytes` (exact: the traced forward runs the same ops). Under autocast this
  includes the low-precision weight copies that matmuls save, which is real memory of mixed precision;
- optimizer_temporaries: the optimizer step's transient buffers at its peak (this follows the implementation
  torch picks for CPU tensors; on CUDA the multi-tensor "foreach" path makes larger ones);
- total: the peak of the whole traced step (forward, backward, optimizer step) as torch's MemTracker sees
  it: what is alive at the worst moment, backward's temporaries (logit gradients, a checkpointed block's
  recomputation) included. It is not the sum of the parts: activations shrink while gradients grow, and
  with checkpointing a recomputed block's full activations come back for a moment.
  Allocator rounding, the CUDA context and kernel workspaces are not modelled (chapter 07 measures them).

Autocast is traced with CPU semantics (CPU and CUDA autocast keep different ops in FP32; chapter 04).
`utils.ledger.gpt.transformer_memory` is the analytic counterpart for `utils.lessons.models.GPT` at any size (1.3B to
70B); `validate` and tests/test_estimate.py check that both agree where both can run. `traced_memory` and
`hf_model_on_meta` trace a Hugging Face model built from its config on the meta device.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from utils.ledger.architectures import Architecture
from utils.ledger.gpt import (
    OPTIMIZERS,
    PRECISIONS,
    STEP_COUNTER_BYTES,
    MemoryEstimate,
    check_step_choices,
    sdpa_attention,
    shape_of,
    state_bytes_per_element,
    transformer_memory,
)
from utils.lessons.measure import SavedTensorCounter, make_mem_tracker, peak_by_category
from utils.validate import check_bool, check_choice, check_instance, check_int, check_number


def param_dtype(precision: str) -> torch.dtype:
    """The dtype parameters (and optimizer states) are kept in."""
    check_choice("precision", precision, PRECISIONS)
    return torch.bfloat16 if precision == "bf16" else torch.float32


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast computes matmuls in (None: no autocast)."""
    check_choice("precision", precision, PRECISIONS)
    return {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(precision)


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks to checkpoint: the largest ModuleList's members."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


@contextmanager
def checkpointed(model: nn.Module) -> Iterator[nn.Module]:
    """Checkpoint the model while inside: each block of its largest ModuleList, or, for an nn.Sequential,
    segments of about sqrt(n) layers. The estimator and the measured runs use the same rule."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    blocks = _blocks(model)
    patched: list[nn.Module] = []
    if blocks:
        for block in blocks:
            block.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False, **k))(block.forward)
            patched.append(block)
    elif isinstance(model, nn.Sequential):
        segments = max(1, round(math.sqrt(len(model))))
        plain = nn.Sequential(*model)  # the same layers, with the class's own forward
        model.forward = lambda x: checkpoint_sequential(plain, segments, x, use_reentrant=False)
        patched.append(model)
    else:
        raise ValueError("checkpointing needs a model with an nn.ModuleList of blocks, or an nn.Sequential")
    try:
        yield model
    finally:
        for module in patched:
            del module.forward  # the instance attribute goes; the class's forward is back


def _fake_input_like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A fake input with the same strides and storage size: a slice keeps its whole storage alive."""
    dtype = dtype or t.dtype
    elements = t.untyped_storage().nbytes() // t.element_size()
    base = torch.empty(elements, dtype=dtype, device="cpu")
    return base.as_strided(t.shape, t.stride(), t.storage_offset()).requires_grad_(t.requires_grad)


@contextmanager
def _fake_state(model: nn.Module, p_dtype: torch.dtype) -> Iterator[list[torch.Tensor]]:
    """Swap the model's parameters and buffers for fake CPU tensors (inside a FakeTensorMode), then back."""
    swapped: list[tuple[dict, str, Any]] = []
    fakes = []
    try:
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is None:
                    continue
                dtype = p_dtype if p.is_floating_point() else p.dtype
                fake = nn.Parameter(torch.empty(p.shape, dtype=dtype, device="cpu"), requires_grad=p.requires_grad)
                swapped.append((module._parameters, name, p))
                module._parameters[name] = fake
                fakes.append(fake)
            for name, b in list(module._buffers.items()):
                if b is not None:
                    swapped.append((module._buffers, name, b))
                    module._buffers[name] = torch.empty(b.shape, dtype=b.dtype, device="cpu")
                    fakes.append(module._buffers[name])
        yield fakes
    finally:
        for table, name, original in reversed(swapped):
            table[name] = original


def _default_loss(out: Any) -> torch.Tensor:
    out = out[0] if isinstance(out, tuple | list) else out
    if not isinstance(out, torch.Tensor):
        raise TypeError("the model's output is not a tensor: pass loss_fn to turn it into a scalar loss")
    return out if out.dim() == 0 else out.float().sum()  # a sum saves nothing for backward


def _training_step(model: nn.Module, inputs: Sequence[torch.Tensor], opt: torch.optim.Optimizer, precision: str,
                   checkpointing: bool, loss_fn: Callable[[Any], torch.Tensor] | None,
                   counter: SavedTensorCounter | None = None) -> Callable[[], None]:
    """One training step as the course runs it: (autocast) forward, loss, backward, step, zero_grad."""
    a_dtype = autocast_dtype(precision)
    device_type = inputs[0].device.type if inputs else "cpu"

    def step() -> None:
        autocast = torch.autocast(device_type, dtype=a_dtype) if a_dtype else nullcontext()
        saving = counter.active() if counter is not None else nullcontext()
        with saving, autocast, (checkpointed(model) if checkpointing else nullcontext()):
            loss = (loss_fn or _default_loss)(model(*inputs))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def estimate_memory(model: nn.Module, example_inputs: Sequence[Any] | torch.Tensor, *, optimizer: str = "adamw",
                    precision: str = "fp32", checkpointing: bool = False,
                    loss_fn: Callable[[Any], torch.Tensor] | None = None) -> MemoryEstimate:
    """Estimate one training step's memory by tracing it on fake tensors (no real memory is used).

    `model` may live on the CPU, an Apple GPU or the meta device; `example_inputs` are the forward's positional
    inputs (real or meta tensors; only shapes, strides and dtypes matter). A model that returns a scalar is taken to
    return its loss; otherwise `loss_fn(output)` (default: a sum) gives it. The model is left unchanged.
    A model on an Apple GPU is traced with SDPA's math kernel, the one it trains with (attention.cpp, v2.13.0:
    the MPS kernel `_scaled_dot_product_attention_math_for_mps` runs only when no input needs a gradient), which
    keeps the attention probabilities for backward.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, Sequence) or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("example_inputs must be a tensor or a sequence of tensors")
    check_step_choices(optimizer, precision, checkpointing)
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable or None, got {type(loss_fn).__name__}")
    p_dtype = param_dtype(precision)
    p_size = torch.finfo(p_dtype).bits // 8
    all_params = list(model.parameters())
    trainable = [p for p in all_params if p.requires_grad]
    params = sum(p.numel() for p in all_params) * p_size
    grads = sum(p.numel() for p in trainable) * p_size
    states = sum(p.numel() for p in trainable) * state_bytes_per_element(optimizer, precision)
    states += STEP_COUNTER_BYTES * len(trainable) if optimizer in ("adam", "adamw") else 0

    on_mps = any(p.device.type == "mps" for p in all_params)
    kernel = sdpa_kernel([SDPBackend.MATH]) if on_mps else nullcontext()
    with kernel, FakeTensorMode(allow_non_fake_inputs=True), _fake_state(model, p_dtype) as fakes:
        inputs = [_fake_input_like(x, p_dtype if precision == "bf16" and x.is_floating_point() else None)
                  for x in example_inputs]
        opt = make_optimizer(optimizer, model.parameters())
        counter = SavedTensorCounter(exclude_tensors=tuple(fakes))
        step = _training_step(model, inputs, opt, precision, checkpointing, loss_fn, counter)
        step()  # the first step creates the optimizer's state
        counter.reset()
        tracker = make_mem_tracker(model, opt)
        with tracker:
            step()
        total = peak_by_category(tracker)["Total"]
        # The optimizer step alone, with gradients in place: MemTracker files what the step allocates under
        # "Optstate", so its peak is the states plus the step's transient buffers.
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.empty_like(p)
        step_tracker = make_mem_tracker(model, opt)
        with step_tracker:
            opt.step()
        temporaries = max(0, peak_by_category(step_tracker).get("Optstate", 0) - states)
    return MemoryEstimate(params, grads, states, counter.bytes, temporaries, total)


def _block_signature(block: nn.Module) -> tuple:
    """What makes two blocks interchangeable for the estimator: class, parameter and buffer shapes, dtypes and
    trainability, and a per-layer attention type where the model has one (sliding-window layers differ)."""
    return (type(block), getattr(block, "attention_type", None),
            tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in block.named_parameters()),
            tuple((n, tuple(b.shape), b.dtype) for n, b in block.named_buffers()))


@contextmanager
def _first_blocks(model: nn.Module, k: int) -> Iterator[None]:
    """Keep only the first k blocks of the model's largest ModuleList while inside (the model is restored)."""
    blocks = _blocks(model)
    holder = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and list(m) == blocks)
    kept = dict(holder._modules)
    try:
        holder._modules.clear()
        holder._modules.update(dict(list(kept.items())[:k]))
        yield
    finally:
        holder._modules.clear()
        holder._modules.update(kept)


def estimate_memory_fast(model: nn.Module, example_inputs: Sequence[Any] | torch.Tensor, *, optimizer: str = "adamw",
                         precision: str = "fp32", checkpointing: bool = False,
                         loss_fn: Callable[[Any], torch.Tensor] | None = None) -> MemoryEstimate:
    """`estimate_memory` in two short traces instead of one long one: when the model's N blocks (its largest
    ModuleList) are interchangeable, trace the model with its first block only and with its first two, and
    extrapolate every part as x1 + (N - 1)(x2 - x1): each identical block adds the same bytes to every part and to
    the step's peak (exact: tests/test_estimate_fast.py compares with the full trace). Otherwise the full trace."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    blocks = _blocks(model)
    kwargs = {"optimizer": optimizer, "precision": precision, "checkpointing": checkpointing, "loss_fn": loss_fn}
    if len(blocks) < 3 or len({_block_signature(b) for b in blocks}) > 1:
        return estimate_memory(model, example_inputs, **kwargs)
    parts = []
    for k in (1, 2):
        with _first_blocks(model, k):
            parts.append([v for _, v in estimate_memory(model, example_inputs, **kwargs).rows()])
    n = len(blocks)
    return MemoryEstimate(*[one + (n - 1) * (two - one) for one, two in zip(*parts, strict=True)])


def make_optimizer(optimizer: str, params: Iterable[torch.Tensor], lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizer named as in the estimator ("sgd", "sgd-momentum", "adam", "adamw")."""
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_number("lr", lr, positive=True)
    if isinstance(params, torch.Tensor | str | bytes) or not isinstance(params, Iterable):
        raise TypeError(f"params must be an iterable of tensors (e.g. model.parameters()), got {type(params).__name__}")
    params = list(params)
    if not all(isinstance(p, torch.Tensor) for p in params):
        raise TypeError("params must hold tensors only (e.g. model.parameters())")
    params = [p for p in params if p.requires_grad]
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return (torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW)(params, lr=lr)


RULES_OF_THUMB: dict[str, Callable[[int, int], int]] = {
    # (parameter count, bytes of the parameters as stored) -> predicted bytes
    "16 B/param": lambda n, _: 16 * n,
    "18 B/param": lambda n, _: 18 * n,
    "4x model size": lambda _, model_bytes: 4 * model_bytes,
}


def measure_step(model: nn.Module, inputs: Sequence[torch.Tensor], *, optimizer: str = "adamw",
                 precision: str = "fp32", checkpointing: bool = False,
                 loss_fn: Callable[[Any], torch.Tensor] | None = None) -> int:
    """The measured peak bytes of a real training step (after a first step created the optimizer state):
    max_memory_allocated on a GPU, MemTracker's tensor bytes on a CPU. Pure "bf16" trains a BF16 copy."""
    import copy

    from utils.lessons.measure import step_peak

    check_instance("model", model, nn.Module)
    check_step_choices(optimizer, precision, checkpointing)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, Sequence) or isinstance(inputs, str | bytes) or \
            not all(isinstance(x, torch.Tensor) for x in inputs):
        raise TypeError(f"inputs must be a tensor or a sequence of tensors, got {type(inputs).__name__}")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable or None, got {type(loss_fn).__name__}")
    if precision == "bf16":
        model = copy.deepcopy(model).to(torch.bfloat16)
        inputs = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs]
    opt = make_optimizer(optimizer, model.parameters())
    return step_peak(_training_step(model, inputs, opt, precision, checkpointing, loss_fn), model, opt)


def validate(configs: Sequence[dict[str, Any]] | None = None) -> list[list[str]]:
    """Estimator vs measured vs rules of thumb, for a small GPT in several configurations (computed)."""
    from utils.lessons.models import GPT, GPTConfig, gpt_batch

    if configs is not None:
        _check_configs(configs)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from utils.lessons.env import device_info

    capability = device_info().capability if device == "cuda" else None  # which SDPA kernel runs
    configs = configs or [
        {"precision": p, "optimizer": o, "checkpointing": ck, "batch": b}
        for p, o, ck, b in [("fp32", "adamw", False, 4), ("fp32", "adamw", True, 4), ("fp32", "sgd", False, 4),
                            ("fp32", "sgd", True, 8), ("fp32", "adamw", False, 16), ("bf16-mixed", "adamw", False, 4),
                            ("bf16-mixed", "adamw", True, 4), ("bf16-mixed", "sgd", False, 8)]]
    rows = []
    for cfg_dict in configs:
        cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256)
        torch.manual_seed(0)
        model = GPT(cfg).to(device)
        x, y = gpt_batch(cfg, cfg_dict["batch"], device=device)
        x, y = x.contiguous(), y.contiguous()
        kwargs = {k: cfg_dict[k] for k in ("optimizer", "precision", "checkpointing")}
        measured = measure_step(model, (x, y), **kwargs)
        shape = shape_of(cfg)
        n = shape.n_params
        guesses = [estimate_memory(model, (x, y), **kwargs).total,
                   transformer_memory(shape, cfg_dict["batch"], attention=sdpa_attention(kwargs["precision"],
                                                                                          capability), **kwargs).total]
        guesses += [rule(n, n * 4) for rule in RULES_OF_THUMB.values()]
        rows.append([cfg_dict["precision"], cfg_dict["optimizer"], "on" if cfg_dict["checkpointing"] else "off",
                     str(cfg_dict["batch"]), f"{measured:,}"]
                    + [f"{g:,} ({100 * (g - measured) / measured:+.1f}%)" for g in guesses])
    return rows


def _check_configs(configs: Any) -> None:
    """`validate`'s configurations: a non-empty list of dicts with precision, optimizer, checkpointing, batch."""
    if not isinstance(configs, Sequence) or isinstance(configs, str | bytes):
        raise TypeError(f"configs must be a list of dicts or None, got {type(configs).__name__}")
    if not configs:
        raise ValueError("configs must hold at least one configuration (or be None for the default ones)")
    for i, cfg in enumerate(configs):
        if not isinstance(cfg, dict):
            raise TypeError(f"configs[{i}] must be a dict, got {type(cfg).__name__}")
        missing = [k for k in ("precision", "optimizer", "checkpointing", "batch") if k not in cfg]
        if missing:
            raise ValueError(f"configs[{i}] lacks {', '.join(missing)} (keys: precision, optimizer, "
                             "checkpointing, batch)")
        check_step_choices(cfg["optimizer"], cfg["precision"], cfg["checkpointing"])
        check_int(f"configs[{i}]['batch']", cfg["batch"], minimum=1)


VALIDATE_HEADERS = ["precision", "optimizer", "checkpointing", "batch", "measured peak B", "traced estimator",
                    "analytic (sum of parts)", *RULES_OF_THUMB]


def main(argv: list[str] | None = None) -> None:
    from utils.lessons.env import device_info
    from utils.lessons.tables import format_table

    parser = argparse.ArgumentParser(description="Memory estimators of the GPU memory course.")
    parser.add_argument("--validate", action="store_true", help="estimator vs measured vs rules of thumb")
    args = parser.parse_args(argv)
    if not args.validate:
        parser.print_help()
        return
    info = device_info()
    how = "max_memory_allocated" if info.is_cuda else "MemTracker (tensor bytes at the step's peak)"
    print(f"Training-step memory of a 2-layer GPT (d=64, T=64, V=256) on {info.name}; measured with {how}.\n")
    print(format_table(validate(), VALIDATE_HEADERS))


if __name__ == "__main__":
    main()


def hf_model_on_meta(arch_or_config: Architecture | dict[str, Any], **overrides: Any) -> Any:
    """A transformers causal-LM built from a config on the meta device (no memory), SDPA attention; `overrides`
    replace config fields (e.g. a smaller num_hidden_layers)."""
    import transformers

    if isinstance(arch_or_config, Architecture):
        raise TypeError("pass the config dict (HF_CONFIGS[name]): an Architecture does not name its model type")
    if not isinstance(arch_or_config, dict):
        raise TypeError(f"arch_or_config must be a config dict, got {type(arch_or_config).__name__}")
    config = transformers.AutoConfig.for_model(**(arch_or_config | overrides), attn_implementation="sdpa")
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def traced_memory(config: dict[str, Any], batch: int, seq_len: int, *, precision: str = "bf16",
                  checkpointing: bool = False, optimizer: str = "adamw") -> Any:
    """One training step of the Hugging Face model of `config` (a config dict: HF_CONFIGS[name]) traced on fake
    tensors (`utils.lessons.estimate.estimate_memory`), fast: the model is built and traced with one layer and with two,
    and every part is extrapolated to the config's layers as x1 + (L - 1)(x2 - x1), which is exact for identical
    layers (tests/test_estimate_fast.py). Building the 32 layers of an 8B model on the meta device alone took
    longer than this whole estimate. The trace keeps what transformers keeps under fake tensors (a T x T mask and K
    and V repeated to every head, see `activation_bytes`): a second witness beside the real steps."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a config dict (HF_CONFIGS[name]), got {type(config).__name__}")
    layers = check_int("config['num_hidden_layers']", config.get("num_hidden_layers"), minimum=1)
    check_int("batch", batch, minimum=1)
    check_int("seq_len", seq_len, minimum=1)
    check_bool("checkpointing", checkpointing)

    class LossOf(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, labels=labels, use_cache=False).loss

    ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    parts = []
    for k in (1, 2):
        model = LossOf(hf_model_on_meta(config, num_hidden_layers=k,
                                        max_position_embeddings=max(seq_len, config.get("max_position_embeddings", 0))))
        parts.append([v for _, v in estimate_memory(model, (ids, ids), optimizer=optimizer, precision=precision,
                                                    checkpointing=checkpointing).rows()])
    return MemoryEstimate(*[one + (layers - 1) * (two - one) for one, two in zip(*parts, strict=True)])
