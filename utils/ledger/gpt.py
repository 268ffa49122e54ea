"""The course's GPT as arithmetic: its shape, chapter 01's formula for what one forward saves, and the analytic
estimate of a training step at any size (1.3B to 70B), without torch.

`TransformerShape` describes `utils.lessons.models.GPT` (LayerNorm, MLP 4x, untied head); `transformer_activation_bytes`
is the bytes autograd saves for backward in one forward of it (its terms are derived in chapter 01 and checked against
real and traced steps by tests/test_estimate.py); `transformer_memory` adds weights, gradients and optimizer states.
`utils.lessons.estimate` traces any model on fake tensors (torch) and reports in the same `MemoryEstimate`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from utils.validate import check_bool, check_choice, check_instance, check_int, check_number


def _param_bytes(precision: str) -> int:
    """Bytes of one parameter (and one optimizer-state element) as kept in `precision`: BF16 in pure BF16, FP32
    otherwise (the mixed precisions keep FP32 master weights)."""
    return 2 if precision == "bf16" else 4


PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
STEP_COUNTER_BYTES = 4  # torch's Adam keeps `step` as a float32 scalar tensor per parameter


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one training step, by part (see the module docstring for what each part counts)."""

    params: int
    grads: int
    optimizer_states: int
    activations: int
    optimizer_temporaries: int
    total: int

    def rows(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def check_step_choices(optimizer: str, precision: str, checkpointing: bool) -> None:
    """Check a training step's optimizer, precision and checkpointing by name (the analytic estimate's and the traced
    estimator's: utils.lessons.estimate)."""
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("precision", precision, PRECISIONS)
    check_bool("checkpointing", checkpointing)


def state_bytes_per_element(optimizer: str, precision: str) -> int:
    """Optimizer state bytes per trainable parameter element (step counters excluded)."""
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("precision", precision, PRECISIONS)
    return _state_bytes_per_element(optimizer, precision)


def _check_activation_args(batch: int, attention: str, dropout: float) -> None:
    check_choice("attention", attention, ("sdpa", "sdpa-math", "eager"))
    check_int("batch", batch, minimum=1)
    check_number("dropout", dropout, minimum=0.0, maximum=0.999)
    if dropout > 0 and attention != "eager":
        raise ValueError("dropout > 0 is modelled with attention='eager' only (SDPA's CPU math kernel under dropout "
                         "keeps other tensors)")


def _state_bytes_per_element(optimizer: str, precision: str) -> int:
    size = _param_bytes(precision)
    return {"sgd": 0, "sgd-momentum": size, "adam": 2 * size, "adamw": 2 * size}[optimizer]


@dataclass(frozen=True)
class TransformerShape:
    """A GPT-style transformer as built by `utils.lessons.models.GPT` (LayerNorm, MLP 4x, untied head)."""

    n_layer: int
    d_model: int
    n_head: int
    seq_len: int
    vocab_size: int

    def __post_init__(self) -> None:
        for f in fields(self):
            check_int(f.name, getattr(self, f.name), minimum=1)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")

    @property
    def n_params(self) -> int:
        d, v, t = self.d_model, self.vocab_size, self.seq_len
        return 2 * v * d + t * d + self.n_layer * (12 * d * d + 13 * d) + 2 * d


def shape_of(cfg: Any) -> TransformerShape:
    """The TransformerShape of a utils.lessons.models.GPTConfig (or any object with the same five fields)."""
    missing = [f for f in ("n_layer", "d_model", "n_head", "seq_len", "vocab_size") if not hasattr(cfg, f)]
    if missing:
        raise TypeError(f"cfg must be a GPTConfig (with n_layer, d_model, n_head, seq_len, vocab_size); "
                        f"got {type(cfg).__name__}, missing {', '.join(missing)}")
    return TransformerShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.seq_len, cfg.vocab_size)


# GPT-style stand-ins for well-known shapes, each named by its own parameter count rounded (this GPT's untied head
# and LayerNorm make them differ from the originals: GPT-2 small's shape has 163M here, 124M with its tied head):
# show `n_params`, which is computed, as their size.
PRESETS: dict[str, TransformerShape] = {
    "163M": TransformerShape(12, 768, 12, 1024, 50257),  # GPT-2 small's shape: 124M there, whose head is tied
    "1.3B": TransformerShape(24, 2048, 16, 2048, 50257),
    "7B": TransformerShape(32, 4096, 32, 4096, 32000),
    "13B": TransformerShape(40, 5120, 40, 4096, 32000),
    "65B": TransformerShape(80, 8192, 64, 4096, 32000),  # LLaMA-65B's shape (no GQA); Llama-2-70B: ARCHITECTURES
}


def transformer_activation_bytes(shape: TransformerShape, batch: int, *, precision: str = "fp32",
                                 checkpointing: bool = False, attention: str = "sdpa", dropout: float = 0.0) -> int:
    """Bytes saved for backward by one forward of `utils.lessons.models.GPT` (CPU semantics), with the loss.

    Per layer, with n = batch x seq tokens, a = residual-stream bytes and c = compute bytes per element: two LayerNorms
    save their input and two statistics (2a.n.d + 4a.n); the matmul inputs, the q/k/v, attention output and the MLP's
    4d-wide tensors save 14c.n.d; SDPA adds a float32 log-sum-exp per head (4.b.h.T), eager attention the mask (T^2) and
    the softmax output (c.b.h.T^2); autocast saves a 2-byte copy of every matmul weight (24 d^2). Checkpointing keeps
    only each block's input (a.n.d). Attention dropout (`dropout` > 0, `utils.lessons.models.GPT` in training mode) with
    eager attention keeps, per score, the dropout's output for the matmul with V and its noise tensor (2c.b.h.T^2: on a
    CPU `torch.dropout` scales by a noise tensor of the input's dtype; CUDA's fused `native_dropout` keeps a 1-byte mask
    instead, the (1 + c) of Korthikanti et al.'s 5as/h). With SDPA the CPU runs its math kernel under dropout: not
    modelled. `attention="sdpa-math"` is SDPA where only its math kernel runs (`sdpa_attention` says where: BF16 below
    compute capability 8.0, a T4 or a V100): instead of the log-sum-exp it keeps the probabilities and the scaled copies
    of q and k that its two matmuls save: torch's `_scaled_dot_product_attention_math`
    (aten/src/ATen/native/transformers/attention.cpp, v2.13.0), which on every device first casts BF16 and FP16 q, k and
    v to FP32 (`query_acc`, unless `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`): in BF16 it keeps
    4.b.h.T^2 of FP32 probabilities and FP32 q, k and v (12.n.d) where the fused kernel kept their BF16 originals
    (6.n.d), 4.b.h.T^2 + 6.n.d in all; in FP32, c.b.h.T^2 + 2c.n.d (measured at batch 1). Both measured with the math
    backend forced on a CPU (tests/test_ledger_errors.py).
    """
    check_instance("shape", shape, TransformerShape)
    check_step_choices("adamw", precision, checkpointing)
    _check_activation_args(batch, attention, dropout)
    return _transformer_activation_bytes(shape, batch, precision=precision, checkpointing=checkpointing,
                                         attention=attention, dropout=dropout)


def _activation_parts(shape: TransformerShape, batch: int, *, precision: str, checkpointing: bool, attention: str,
                      dropout: float) -> tuple[int, int]:
    """Bytes one block saves and bytes saved outside the blocks: `transformer_activation_bytes` is
    n_layer x the first + the second."""
    d, h, t, v, b = shape.d_model, shape.n_head, shape.seq_len, shape.vocab_size, batch
    n = b * t
    mixed = precision in ("bf16-mixed", "fp16-mixed")  # autocast saves 2-byte weight copies
    a = 2 if precision == "bf16" else 4
    c = 2 if precision != "fp32" else 4
    if checkpointing:
        per_layer = a * n * d
    else:
        per_layer = 2 * a * n * d + 4 * a * n + 14 * c * n * d + (24 * d * d if mixed else 0)
        math = 4 * b * h * t * t + 6 * n * d if c == 2 else c * b * h * t * t + 2 * c * n * d  # FP32 upcast in BF16
        per_layer += {"sdpa": 4 * b * h * t, "sdpa-math": math,
                      "eager": t * t + c * b * h * t * t}[attention]
        per_layer += 2 * c * b * h * t * t if dropout > 0 else 0
    # Outside the blocks: token ids, positions, final LayerNorm, head input (and weight copy under
    # autocast), log-softmax of the logits (float32 unless pure BF16), targets, and the loss's weight sum.
    outside = 8 * n + 8 * t + a * n * d + 2 * a * n + c * n * d + (2 * v * d if mixed else 0)
    outside += (2 if precision == "bf16" else 4) * n * v + 8 * n + a
    return per_layer, outside


def _transformer_activation_bytes(shape: TransformerShape, batch: int, *, precision: str, checkpointing: bool,
                                  attention: str, dropout: float) -> int:
    per_layer, outside = _activation_parts(shape, batch, precision=precision, checkpointing=checkpointing,
                                           attention=attention, dropout=dropout)
    return shape.n_layer * per_layer + outside


def sdpa_attention(precision: str, capability: tuple[int, int] | None = None) -> str:
    """Which of `transformer_activation_bytes`' SDPA kernels torch runs for the GPT's attention: "sdpa" (a fused
    kernel that keeps a log-sum-exp per head and token: the CPU's flash kernel, CUDA's flash kernel from compute
    capability 8.0 in FP16/BF16, or its memory-efficient kernel, which takes FP32 and FP16 from 5.0 and BF16 only
    from 8.0) or "sdpa-math" (BF16 on a GPU below 8.0: the math kernel). `capability` None is a CPU.
    Source: torch's aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (`check_sm_version`,
    `check_tensor_dtype`: flash needs sm80+, mem-efficient lists BF16 only for sm80+). An Apple GPU trains with the
    math kernel (`estimate_memory` traces a model on MPS so); this function answers for CUDA GPUs and the CPU."""
    check_choice("precision", precision, PRECISIONS)
    check_capability(capability)
    return _sdpa_attention(precision, capability)


def check_capability(capability: tuple[int, int] | None) -> None:
    """A CUDA compute capability as torch gives it, (major, minor) of non-negative ints, or None (no CUDA GPU)."""
    if capability is not None and not (
            isinstance(capability, tuple) and len(capability) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in capability)):
        raise TypeError(f"capability must be None or a (major, minor) tuple of non-negative ints, got {capability!r}")


def _sdpa_attention(precision: str, capability: tuple[int, int] | None = None) -> str:
    if capability is None:
        return "sdpa"
    bf16 = precision in ("bf16", "bf16-mixed")
    return "sdpa-math" if bf16 and capability < (8, 0) else "sdpa"


def transformer_memory(shape: TransformerShape, batch: int, *, optimizer: str = "adamw", precision: str = "fp32",
                       checkpointing: bool = False, attention: str = "sdpa", dropout: float = 0.0) -> MemoryEstimate:
    """The analytic estimate for `utils.lessons.models.GPT` at any size (optimizer temporaries not modelled: 0)."""
    check_instance("shape", shape, TransformerShape)
    check_step_choices(optimizer, precision, checkpointing)
    _check_activation_args(batch, attention, dropout)
    p = shape.n_params
    size = _param_bytes(precision)
    tensors = 2 + shape.n_layer * 12 + 2 + 1  # two embeddings, 12 per block (weights, biases), ln_f, head
    states = p * _state_bytes_per_element(optimizer, precision)
    states += STEP_COUNTER_BYTES * tensors if optimizer in ("adam", "adamw") else 0
    acts = _transformer_activation_bytes(shape, batch, precision=precision, checkpointing=checkpointing,
                                        attention=attention, dropout=dropout)
    return MemoryEstimate(p * size, p * size, states, acts, 0, p * size * 2 + states + acts)
