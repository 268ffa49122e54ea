"""Real training steps of small Hugging Face models and the course's GPT, metered from outside the ledger.

The ledger (`utils.ledger.plan.memory_of`) promises an upper bound of a step's peak. This module runs the step for real
on the CPU and meters its peak twice, by methods that share nothing with the ledger or the estimator's traces:
- `StorageMeter`, a TorchDispatchMode that adds each new tensor storage's bytes when an operator creates it and
  subtracts them when the storage is freed (weakref.finalize), on top of the bytes alive when the step starts
  (parameters, gradients, optimizer states, the batch);
- glibc's `mallinfo2()` (bytes the C allocator hands out: torch's CPU allocator calls posix_memalign), sampled
  after every operator, less its value when the step starts, plus the same starting bytes.
tests/test_real_steps.py asserts that the two meters agree and that the ledger is never below the measured peak
and at most 5% above it, model by model and regime by regime. `python -m tests.real_steps` prints the table.
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.simulated_gpu import HALF_MATMULS, half_matmul_in_fp32
from utils.ledger.architectures import ArchitectureShape, from_hf_config
from utils.ledger.plan import Choice, memory_of

# Small models of each family the planner knows (Llama's from the issue: hidden 256, 4 layers, 8 heads, 2 KV heads,
# SwiGLU 688, vocabulary 32,000); the same fields as the presets' config.json.
SMALL_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
              "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 32000, "tie_word_embeddings": False,
              "max_position_embeddings": 2048},
    "mistral": {"model_type": "mistral", "num_hidden_layers": 3, "hidden_size": 320, "num_attention_heads": 8,
                "num_key_value_heads": 4, "intermediate_size": 896, "vocab_size": 24000,
                "tie_word_embeddings": False, "max_position_embeddings": 2048, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 3, "hidden_size": 224, "num_attention_heads": 7,
              "num_key_value_heads": 1, "intermediate_size": 608, "vocab_size": 30000, "tie_word_embeddings": False,
              "max_position_embeddings": 2048},
    # a small vocabulary and short sequences: the model states outweigh the activations, and the optimizer step
    # (AdamW's multi-tensor temporaries) sets the peak
    "llama-small-vocab": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                          "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 512,
                          "tie_word_embeddings": False, "max_position_embeddings": 2048},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 192, "num_attention_heads": 6,
                "num_key_value_heads": 2, "intermediate_size": 384, "vocab_size": 16000,
                "tie_word_embeddings": False, "num_local_experts": 4, "num_experts_per_tok": 2,
                "max_position_embeddings": 2048},
}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo() -> Any:
    """glibc's mallinfo2 (None where the C library has none: then only the storage meter runs)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return lambda: (lambda m: m.uordblks + m.hblkhd)(fn())


MALLINFO = _mallinfo()


def _storages(objects: Any) -> dict[int, int]:
    """data_ptr -> bytes of the distinct CPU storages under `objects` (tensors, or nested lists / dicts of them)."""
    out: dict[int, int] = {}
    for t in tree_flatten(objects)[0]:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            if type(t) not in (torch.Tensor, torch.nn.Parameter) and hasattr(t, "__tensor_flatten__"):
                names, _ = t.__tensor_flatten__()  # a tensor subclass (torchao's NF4, 8-bit states): its inner ones
                out |= _storages([getattr(t, n) for n in names])
                continue
            s = t.untyped_storage()
            if s.nbytes():
                out[s.data_ptr()] = s.nbytes()
    return out


class StorageMeter(TorchDispatchMode):
    """Live bytes of the step: the storages alive at the start (given) plus every storage an operator creates,
    until it is freed; the peak, the operator at the peak, and glibc's in-use bytes sampled after every operator."""

    def __init__(self, start: dict[int, int]) -> None:
        super().__init__()
        self._alive = dict(start)  # storages alive at the start are never counted again (views of them)
        self.live = self.start = sum(start.values())
        self.peak, self.peak_op = self.live, "start"
        self.malloc_start = MALLINFO() if MALLINFO else 0
        self.malloc_peak = 0

    def _free(self, key: int, nbytes: int) -> None:
        if self._alive.get(key) == nbytes:
            del self._alive[key]
            self.live -= nbytes

    def _count(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return
        if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):  # a subclass: its inner tensors
            for name in t.__tensor_flatten__()[0]:
                self._count(getattr(t, name))
            return
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes and key not in self._alive:
            self._alive[key] = nbytes
            weakref.finalize(storage, self._free, key, nbytes)
            self.live += nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._count(t)
        if self.live > self.peak:
            self.peak, self.peak_op = self.live, str(func)
        if MALLINFO:
            self.malloc_peak = max(self.malloc_peak, MALLINFO() - self.malloc_start)
        return out

    @property
    def malloc_measured(self) -> int:
        """The second meter: glibc's peak in-use bytes above the start, plus the bytes alive at the start."""
        return self.start + self.malloc_peak


class HalfMatmulsInFP32(TorchDispatchMode):
    """Below the meters, on a CPU without native BF16 matmuls: FP16/BF16 matmuls computed in FP32 and rounded to
    their dtype (`simulated_gpu.half_matmul_in_fp32`). With AVX2 only, torch's own BF16 matmul runs at about 1
    GFLOP/s against 100 in FP32, and the autocast regimes took 40 s a step pair. The meters see the same operator
    with the same output (shape, dtype, storage); the FP32 temporaries live inside the operator and are freed before
    the meter samples glibc, as a native kernel's registers and scratch are."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = half_matmul_in_fp32(func, args, kwargs) if func.overloadpacket.__name__ in HALF_MATMULS else None
        return func(*args, **kwargs) if out is None else out


def fast_half_matmuls() -> Any:
    """`HalfMatmulsInFP32` where torch's CPU BF16 matmul is emulated (oneDNN's needs AVX512 or AMX), else nothing."""
    return nullcontext() if torch.ops.mkldnn._is_mkldnn_bf16_supported() else HalfMatmulsInFP32()


@dataclass(frozen=True)
class Regime:
    """A configuration the planner offers, as a real step runs it and as a `Choice` ledgers it."""

    name: str
    choice: Choice
    foreach: bool = True  # AdamW's multi-tensor step, the CUDA default (the CPU default is one tensor at a time)


def _no_compile(fn: Any = None, **_: Any) -> Any:
    return fn if fn is not None else (lambda f: f)


def _nf4_base(model: torch.nn.Module) -> None:
    """QLoRA's base: every decoder-layer Linear's weight as a frozen torchao NF4 tensor (BF16 compute)."""
    from torchao.quantization import to_nf4

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".layers." in name and "lora_" not in name:
            scalers = module.weight.numel() // 64  # torchao needs whole blocks of scale factors
            block = next(b for b in (256, 128, 64, 32, 16, 8) if scalers % b == 0)
            module.weight = torch.nn.Parameter(to_nf4(module.weight.data.to(torch.bfloat16), 64, block),
                                               requires_grad=False)


def build(kind: str, regime: Regime, seed: int = 0) -> tuple[torch.nn.Module, Any]:
    """A small Hugging Face model of `kind` (SMALL_CONFIGS) set up as `regime` says, with its optimizer."""
    import warnings

    import transformers

    torch.manual_seed(seed)
    c = regime.choice
    cfg = SMALL_CONFIGS[kind]
    config = transformers.AutoConfig.for_model(**cfg, attn_implementation="sdpa")
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.train()
    if c.precision == "bf16" or c.lora_rank:
        model = model.to(torch.bfloat16)
    if c.checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if c.lora_rank:
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        if c.lora_targets == "attention+mlp":
            targets += ["gate_proj", "up_proj", "down_proj"]
        if c.quantize_base:
            _nf4_base(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = get_peft_model(model, LoraConfig(r=c.lora_rank, lora_alpha=2 * c.lora_rank, lora_dropout=0.0,
                                                     target_modules=targets))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()  # FP32 adapters
    trainable = [p for p in model.parameters() if p.requires_grad]
    if c.optimizer == "adamw":
        opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=regime.foreach)
    else:
        from torchao.optim import AdamW4bit, AdamW8bit

        opt = (AdamW8bit if c.optimizer == "adamw8bit" else AdamW4bit)(trainable, lr=1e-4)
    return model, opt


def _loss(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    if not chunk_tokens:
        return model(input_ids=ids, labels=labels).loss
    from utils.lessons.chunked_loss import chunked_cross_entropy

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.model(input_ids=ids).last_hidden_state
    targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)  # HF's shift
    return chunked_cross_entropy(hidden, base.lm_head.weight, targets, chunk_tokens)


def measure(kind: str, regime: Regime, seq_len: int, seed: int = 0) -> dict[str, Any]:
    """One optimizer step of `kind` under `regime` (its choice's micro-batch and accumulation) at `seq_len` tokens:
    the two meters' peaks, the ledger's lines and total for the same configuration, and the operator at the peak.
    A first step runs unmetered (it creates the optimizer's state); the metered one is the second."""
    c = regime.choice
    model, opt = build(kind, regime, seed)
    gen = torch.Generator().manual_seed(seed)
    vocab = SMALL_CONFIGS[kind]["vocab_size"]
    batches = [torch.randint(0, vocab, (c.micro_batch, seq_len), generator=gen) for _ in range(c.accumulation)]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if c.precision == "bf16-mixed" or c.lora_rank \
        else nullcontext()
    compile_patch = mock.patch.object(torch, "compile", _no_compile) if c.optimizer != "adamw" else nullcontext()

    def micro(ids: torch.Tensor) -> None:
        with autocast:
            loss = _loss(model, ids, ids, c.chunked_loss)
        (loss / c.accumulation).backward()

    with compile_patch, fast_half_matmuls():  # the meter, entered below, sees each operator before it
        for ids in batches:
            micro(ids)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for ids in batches[:-1]:  # the metered part: the last micro-batch with the others' gradients alive
            micro(ids)
        gc.collect()
        state = [list(model.parameters()), list(model.buffers()), [p.grad for p in model.parameters()],
                 [list(s.values()) for s in opt.state.values()], batches]
        meter = StorageMeter(_storages(state))
        del state
        with meter:
            micro(batches[-1])
            opt.step()
        opt.zero_grad(set_to_none=True)
    shape = ArchitectureShape(from_hf_config(SMALL_CONFIGS[kind]), seq_len, kind)
    parts = memory_of(shape, c)
    return {"kind": kind, "regime": regime.name, "measured": meter.peak, "malloc": meter.malloc_measured,
            "peak op": meter.peak_op, "ledger": sum(parts.values()), "parts": parts}


def measure_gpt(cfg: Any, regime: Regime, seed: int = 0) -> dict[str, Any]:
    """`measure` for the course's GPT (utils.lessons.models.GPT), trained as `utils.lessons.plan_runs.run_choice` trains
    it."""
    from functools import partial

    from utils.ledger.gpt import shape_of
    from utils.lessons.plan_runs import _prepare

    c = regime.choice
    with mock.patch.object(torch.optim, "AdamW", partial(torch.optim.AdamW, foreach=True)):  # the CUDA default
        run = _prepare(cfg, c, seed)
    with run.no_compile, fast_half_matmuls():
        run.optimizer_step()  # creates the optimizer's state
        for i in range(c.accumulation - 1):
            run.micro_step(run.inputs[i * c.micro_batch:(i + 1) * c.micro_batch],
                           run.targets[i * c.micro_batch:(i + 1) * c.micro_batch])
        gc.collect()
        state = [list(run.model.parameters()), list(run.model.buffers()), [p.grad for p in run.model.parameters()],
                 [list(s.values()) for s in run.opt.state.values()], run.inputs, run.targets]
        meter = StorageMeter(_storages(state))
        del state
        with meter:
            run.last_micro_batch()
    parts = memory_of(shape_of(cfg), c)
    return {"kind": "GPT", "regime": regime.name, "measured": meter.peak, "malloc": meter.malloc_measured,
            "peak op": meter.peak_op, "ledger": sum(parts.values()), "parts": parts}


REGIMES: tuple[Regime, ...] = (
    Regime("fp32", Choice(micro_batch=4)),
    Regime("autocast bf16", Choice(precision="bf16-mixed", micro_batch=4)),
    Regime("pure bf16", Choice(precision="bf16", micro_batch=4)),
    Regime("fp32 + checkpointing", Choice(micro_batch=4, checkpointing=True)),
    Regime("autocast + checkpointing", Choice(precision="bf16-mixed", micro_batch=4, checkpointing=True)),
    Regime("autocast + accumulation 2 x 2", Choice(precision="bf16-mixed", micro_batch=2, accumulation=2)),
    Regime("autocast + chunked loss", Choice(precision="bf16-mixed", micro_batch=4, chunked_loss=256)),
    Regime("autocast + 8-bit AdamW", Choice(precision="bf16-mixed", micro_batch=4, optimizer="adamw8bit")),
    Regime("LoRA r=16", Choice(precision="bf16-mixed", micro_batch=4, lora_rank=16)),
    Regime("LoRA r=16 + checkpointing", Choice(precision="bf16-mixed", micro_batch=4, lora_rank=16,
                                               checkpointing=True)),
    Regime("QLoRA r=16 (NF4)", Choice(precision="bf16-mixed", micro_batch=4, lora_rank=16, quantize_base=True)),
)


def table(kinds: tuple[str, ...] = tuple(SMALL_CONFIGS), regimes: tuple[Regime, ...] = REGIMES,
          seq_len: int = 256) -> Any:
    """measure() of every model kind in every regime, one row at a time."""
    return (measure(k, r, seq_len) for k in kinds for r in regimes)


if __name__ == "__main__":
    import sys

    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    kinds = tuple(args[0].split(",")) if args else tuple(SMALL_CONFIGS)
    names = args[1].split(";") if len(args) > 1 else None
    regimes = tuple(r for r in REGIMES if names is None or r.name in names)
    print(f"{'model':8} {'regime':32} {'measured':>12} {'malloc':>12} {'ledger':>12} {'ratio':>6}  peak op")
    for row in table(kinds, regimes):
        print(f"{row['kind']:8} {row['regime']:32} {row['measured']:12,} {row['malloc']:12,} {row['ledger']:12,} "
              f"{row['ledger'] / row['measured']:6.3f}  {row['peak op']}", flush=True)
        if "-v" in sys.argv:
            print("   ", {k: v for k, v in row["parts"].items() if v})
