"""The capstone's planner: fit a transformer's training into one GPU's memory, technique by technique.

Chapter 09 builds this logic cell by cell in the notebook (a budget ledger, one technique per cell, each with
its formula); this module packages the same functions for the widget and the lab, and tests/test_ch09_ledger.py
checks that the notebook's functions and these give the same bytes on many inputs.

Per GPU, for a `TransformerShape` (utils.ledger.gpt: the course's GPT) or an `ArchitectureShape`
(utils.ledger.architectures: a real model from its Hugging Face config, with grouped-query attention, a gated MLP,
mixture-of-experts layers) at a micro-batch, the ledger counts (the model-state bytes per parameter read from
utils.ledger.setups, the course's one table of them; a Choice may also name Megatron-LM's or DeepSpeed's setup there):
- weights: FP32 under torch.amp (`bf16-mixed`: FP32 weights, ops cast per call), BF16 in pure BF16 and for a
  frozen LoRA base, NF4 (4 bits plus block scales, 0.516 B/param) for a QLoRA base's block matrices;
- gradients and optimizer states of the trainable parameters only: AdamW 8 B/param of FP32 state (4 in pure
  BF16), torchao's AdamW8bit 2 x (1 + 4/256) and AdamW4bit 2 x (0.5 + 4/128) B/param (block-wise scales);
- saved activations: chapter 01's formula (`utils.ledger.gpt.transformer_activation_bytes`), with the residual
  stream in BF16 for a BF16 base and the logits up-cast to FP32 for the loss (as Hugging Face's loss does);
- backward's transients: the FP32 gradient of the logits (tokens x vocabulary x 4 B) and, under
  checkpointing, the one block whose activations are recomputed; LoRA's low-rank intermediates;
- under torch.amp with checkpointing, autocast's cache of BF16 weight copies, alive until the forward's autocast
  region exits (the part of that moment above backward's transients);
- sharding over N GPUs (torch.amp's accounting): ZeRO-1 divides optimizer states, ZeRO-2 also gradients,
  ZeRO-3/FSDP also weights, and then holds a gathered block (plus the prefetched next one) in the compute dtype;
- offload: ZeRO-Offload keeps BF16 weights on the GPU and sends gradients to the host, where the FP32 master
  weights and Adam's states live and the step runs; parameter offload (ZeRO-Infinity, FSDP2's
  CPUOffloadPolicy) keeps only the blocks in use on the GPU.

The ledger is a sum of lines, each at its largest: for the course's GPT an upper bound of the step's peak, reached
when gradients accumulate over micro-batches (the gradients then coexist with a micro-batch's activations); a model
whose layers keep tensors the ledger does not list can peak above it (chapter 09 measures Hugging Face's GPT-2).

`costs` gives what each choice costs instead of memory, on the schedule the ledger holds (sharded or offloaded
gradients leave after every micro-batch): recomputation, communication per GPU, PCIe traffic. `host_memory_of`
is the host side of an offload plan, and `plan(..., host_bytes=)` skips offload plans the host cannot hold.
`usable_budget` turns the memory a GPU reports into the bytes a plan may use (headroom for the CUDA context,
cuBLAS workspaces and allocator fragmentation). `plan()` tries the techniques in order of cost and stops at the
first configuration that fits, explaining every step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from utils.ledger.architectures import ArchitectureShape, _lora_parameters_of
from utils.ledger.architectures import _activation_parts as arch_activation_parts
from utils.ledger.budget import GIB, gpu_budget
from utils.ledger.gpt import PRESETS, MemoryEstimate, TransformerShape, _sdpa_attention, check_capability
from utils.ledger.gpt import _activation_parts as gpt_activation_parts
from utils.ledger.setups import SETUPS, _setup_lines
from utils.validate import check_bool, check_choice, check_instance, check_int, check_number

PRECISIONS = ("fp32", "bf16-mixed", "bf16")
OPTIMIZERS = ("adamw", "adamw8bit", "adamw4bit")  # what the planner chooses among (chapter 09)
ALL_OPTIMIZERS = (*OPTIMIZERS, "adam", "sgd-momentum", "sgd")  # also ledgered (chapter 01's will_it_fit)
SHARDING = ("none", "zero1", "zero2", "zero3")
LORA_TARGETS = ("attention", "attention+mlp")


# Where the ledger's model-state bytes per parameter come from (utils.ledger.setups, the one table of them): the
# setup of each precision, of LoRA's frozen base and FP32 adapters, of ZeRO-Offload, and the full-training setups a
# Choice may name instead of its precision's (Megatron-LM's and DeepSpeed's, QLoRA's 12 B/param baseline).
PRECISION_SETUPS = {"fp32": "torch.amp (fp32 weights, adamw)", "bf16-mixed": "torch.amp (fp32 weights, adamw)",
                    "bf16": "pure bf16 (adamw in bf16)"}
LORA_BASE_SETUP, ADAPTER_SETUP, OFFLOAD_SETUP = ("frozen bf16 base", "fp32 adapters + adamw",
                                                 "zero-offload (bf16 on the gpu)")
TRAINING_SETUPS = ("megatron fp16 params + fp16 grads", "megatron bf16 params + fp32 grads",
                   "megatron fp32 params + fp32 grads", "deepspeed zero-2 bf16", "bf16 weights + fp32 adam")
assert set(TRAINING_SETUPS) | set(PRECISION_SETUPS.values()) | {LORA_BASE_SETUP, ADAPTER_SETUP,
                                                                   OFFLOAD_SETUP} <= set(SETUPS)

SHAPES = (TransformerShape, ArchitectureShape)  # the course's GPT, or a real architecture at a sequence length
Shape = TransformerShape | ArchitectureShape

# ZeRO-Offload's buffers (DeepSpeed v0.19.5, deepspeed/runtime/zero/stage_1_and_2.py, which runs ZeRO stages 0-2;
# before v0.17.0 the offload step also copied the FP32 partition to the GPU, 4 B/param more: PR #7309). On the GPU:
# - the gradient bucket: contiguous_gradients, forced on under offload, has each backward allocate a BF16 buffer of
#   zero_optimization.reduce_bucket_size elements, 5e8 by default (zero/config.py), and copy each gradient into it
#   as backward produces it (`setup_buckets`; `backward` before v0.17); overlap_comm, off by default for ZeRO-2,
#   adds a second one. A parameter larger than the bucket is reduced in place instead (`extra_large_param_to_reduce`):
#   its own gradient lives beside the bucket;
# - a staging buffer as large as the largest parameter, kept for the whole run (`temp_grad_buffer_for_gpu_offload`):
#   each micro-batch after the first brings the host's accumulated gradient back through it to add the new one;
# - at each step's last micro-batch, per parameter, an FP64 copy of its gradient for the norm
#   (`set_norm_for_param_grad_in_gpu`: `.double().norm(2)`, 8 B per element), then the overflow check
#   (`_has_inf_or_nan`: an FP32 copy, two boolean masks and their OR, and an FP32 copy of that, 11 B per element
#   at once), then an FP32 copy for the host: 11 B per element of the largest parameter, during backward.
# On the host: the FP32 master weights, their FP32 gradient and Adam's moments (16 B/param), a BF16 copy of the
# weights that stages the update (`param_buffer_of_bit16_for_cpu_offload_groups`, 2), with accumulation one BF16
# buffer per parameter where the micro-batches' gradients add up (`async_accumulate_grad_in_cpu_via_gpu`, 2), and
# a host twin of the staging buffer. All but Adam's moments are pinned (offload_config.py: pin_memory defaults to
# True), and torch's pinned-memory allocator rounds each block up to a power of two
# (ATen/core/CachingHostAllocator.h, `allocate`: PowerOf2Ceil below pinned_max_round_threshold, unbounded by default):
# the flat FP32 master of a 7B model, 25 GiB, takes 32. Parameter offload and ZeRO-3 run stage3.py, whose GPU buffers
# differ: this ledger keeps its simpler count there (the bucket and one block of gradients).
REDUCE_BUCKET_ELEMENTS = 500_000_000
PCIE_GB_PER_S = 25.0  # PCIe 4.0 x16: 32 GB/s on paper, about 25 achieved host <-> device (pinned memory)


def optimizer_state_bytes_per_param(optimizer: str, param_bytes: int = 4) -> float:
    """Bytes of optimizer state per trainable parameter: AdamW's two moments in the parameter's dtype, or
    torchao's 8-bit / 4-bit moments with one FP32 scale per block of 256 / 128 values (step counters aside);
    Adam as AdamW, SGD with momentum one buffer, plain SGD none."""
    check_choice("optimizer", optimizer, ALL_OPTIMIZERS)
    check_choice("param_bytes", param_bytes, (2, 4))
    return _optimizer_state_bytes_per_param(optimizer, param_bytes)


def _optimizer_state_bytes_per_param(optimizer: str, param_bytes: int = 4) -> float:
    if optimizer == "sgd":
        return 0.0
    if optimizer == "sgd-momentum":
        return float(param_bytes)
    if optimizer in ("adamw", "adam"):
        return 2 * param_bytes
    if optimizer == "adamw8bit":
        return 2 * (1 + 4 / 256)
    return 2 * (0.5 + 4 / 128)


NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)  # 4-bit codes, an 8-bit scale per 64, an FP32 per 256 scales


def lora_parameters(shape: Shape, rank: int, targets: str = "attention", fused_qkv: bool = False) -> int:
    """Trainable parameters of rank-`rank` LoRA adapters: an adapter on a (d_in x d_out) matrix adds
    rank x (d_in + d_out). "attention": q, k, v and the output projection (4 d x d matrices, or with
    `fused_qkv` one d x 3d matrix and the d x d output); "attention+mlp" adds the MLP's d x 4d and 4d x d.
    A real architecture (ArchitectureShape): `utils.ledger.architectures.lora_parameters_of` (grouped-query k and v,
    the gated MLP's three matrices per expert)."""
    check_instance("shape", shape, SHAPES)
    check_int("rank", rank, minimum=1)
    check_choice("targets", targets, LORA_TARGETS)
    check_bool("fused_qkv", fused_qkv)
    return _lora_parameters(shape, rank, targets, fused_qkv)


def _lora_parameters(shape: Shape, rank: int, targets: str = "attention", fused_qkv: bool = False) -> int:
    if isinstance(shape, ArchitectureShape):
        if fused_qkv:
            raise ValueError("fused_qkv describes the course's GPT (one d x 3d matrix); a real architecture keeps "
                             "q, k and v apart")
        return _lora_parameters_of(shape.arch, rank, targets)
    d = shape.d_model
    per_layer = rank * (d + 3 * d) + rank * (d + d) if fused_qkv else 4 * rank * (d + d)
    if targets == "attention+mlp":
        per_layer += rank * (d + 4 * d) + rank * (4 * d + d)
    return shape.n_layer * per_layer


@dataclass(frozen=True)
class Choice:
    """One training configuration (per GPU)."""

    precision: str = "fp32"  # "fp32", "bf16-mixed" (torch.amp: FP32 weights) or "bf16" (pure BF16 weights)
    checkpointing: bool = False
    micro_batch: int = 1
    accumulation: int = 1
    optimizer: str = "adamw"  # "adamw", "adamw8bit", "adamw4bit" (torchao)
    lora_rank: int = 0  # 0: full fine-tuning; r > 0: LoRA adapters on a frozen BF16 base
    lora_targets: str = "attention"
    quantize_base: bool = False  # QLoRA: the frozen base's block matrices in NF4 (needs lora_rank > 0)
    sharding: str = "none"
    n_gpus: int = 1
    offload_optimizer: bool = False  # ZeRO-Offload: FP32 master weights, Adam and the step on the host
    offload_parameters: bool = False  # ZeRO-Infinity / FSDP2 CPUOffloadPolicy: weights on the host too
    chunked_loss: int = 0  # tokens per chunk of a chunked linear-cross-entropy (0: the whole logits at once)
    setup: str = ""  # a named full-training setup (TRAINING_SETUPS, utils.ledger.setups) instead of the precision's own
    tensor_parallel: int = 1  # t: each layer's matrices split over t GPUs (Megatron-LM), the ranks of one replica
    sequence_parallel: bool = False  # the layers' rest (norms, their inputs) split over the t ranks too
    pipeline_stages: int = 1  # p: the layers split into p consecutive stages, one per GPU, 1F1B schedule
    pipeline_chunks: int = 1  # m > 1: the interleaved schedule, m model chunks per stage
    # The compute capability (major, minor) of the CUDA GPU the run targets, or None (a CPU, or a GPU the plan does
    # not name): it decides SDPA's kernel (`attention`); below 8.0 BF16 attention runs the math kernel
    capability: tuple[int, int] | None = None
    # "cuda" (a CUDA GPU, or a GPU the plan does not name), "mps" (an Apple GPU: it trains with SDPA's math kernel in
    # every precision, attention.cpp) or "cpu" (its flash kernel)
    device: str = "cuda"

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        for name in ("checkpointing", "quantize_base", "offload_optimizer", "offload_parameters"):
            check_bool(name, getattr(self, name))
        for name in ("micro_batch", "accumulation", "n_gpus", "tensor_parallel", "pipeline_stages",
                     "pipeline_chunks"):
            check_int(name, getattr(self, name), minimum=1)
        check_bool("sequence_parallel", self.sequence_parallel)
        if self.sequence_parallel and self.tensor_parallel < 2:
            raise ValueError("sequence_parallel needs tensor_parallel >= 2 (it splits the rest of each layer over "
                             "the tensor-parallel ranks)")
        if self.pipeline_chunks > 1 and self.pipeline_stages < 2:
            raise ValueError("pipeline_chunks > 1 (the interleaved schedule) needs pipeline_stages >= 2")
        if self.pipeline_chunks > 1 and self.accumulation % self.pipeline_stages:
            # Megatron-LM refuses it too (megatron/core/pipeline_parallel/schedules.py, "number of microbatches
            # is not divisible by pipeline-model-parallel-size when using interleaved schedule")
            raise ValueError(f"the interleaved schedule (pipeline_chunks > 1) needs accumulation (micro-batches, "
                             f"{self.accumulation}) to be a multiple of pipeline_stages ({self.pipeline_stages})")
        if (self.tensor_parallel > 1 or self.pipeline_stages > 1) and self.offload_optimizer:
            raise ValueError("tensor_parallel / pipeline_stages with offload_optimizer: not modelled by this ledger")
        check_int("lora_rank", self.lora_rank, minimum=0)
        check_int("chunked_loss", self.chunked_loss, minimum=0)
        check_choice("optimizer", self.optimizer, ALL_OPTIMIZERS)
        check_choice("lora_targets", self.lora_targets, LORA_TARGETS)
        check_choice("sharding", self.sharding, SHARDING)
        if self.sharding != "none" and self.n_gpus < 2:
            raise ValueError("sharding needs n_gpus >= 2")
        if self.quantize_base and not self.lora_rank:
            raise ValueError("quantize_base (QLoRA) needs lora_rank > 0: an NF4 base is frozen")
        if self.offload_parameters and not self.offload_optimizer:
            raise ValueError("offload_parameters needs offload_optimizer=True (the host then runs the step)")
        if self.setup != "":
            check_choice("setup", self.setup, TRAINING_SETUPS)
            if self.lora_rank or self.offload_optimizer:
                raise ValueError("setup names a full-training setup: it excludes lora_rank and offload")
        if (self.offload_optimizer or self.offload_parameters) and self.precision == "fp32":
            raise ValueError("offload keeps BF16 weights on the GPU: use precision 'bf16-mixed' or 'bf16'")
        check_capability(self.capability)
        check_choice("device", self.device, ("cuda", "mps", "cpu"))

    @property
    def attention(self) -> str:
        """SDPA's kernel for this run's attention ("sdpa": a fused kernel; "sdpa-math": the math kernel, which
        keeps the T x T probabilities), from the device, the precision the layers compute in and `capability`
        (`utils.ledger.gpt.sdpa_attention`, read from torch's sdp_utils.cpp; an Apple GPU always runs the math kernel
        when training: attention.cpp)."""
        if self.device == "mps":
            return "sdpa-math"
        return _sdpa_attention(_compute_precision(self.regime), self.capability if self.device == "cuda" else None)

    @property
    def regime(self) -> str:
        """How the weights are kept: 'fp32', 'bf16-mixed' (FP32 weights), 'bf16' (BF16 weights) or a frozen
        'bf16-base' / 'nf4-base' under LoRA, or 'offload' (BF16 on the GPU, FP32 master on the host)."""
        if self.lora_rank:
            return "nf4-base" if self.quantize_base else "bf16-base"
        if self.offload_optimizer:
            return "offload"
        return self.precision

    def describe(self) -> str:
        parts = [self.precision if not self.lora_rank else "BF16 compute",
                 f"micro-batch {self.micro_batch} x {self.accumulation} accumulation"]
        parts += ["checkpointing"] if self.checkpointing else []
        parts += [self.optimizer] if self.optimizer != "adamw" else []
        if self.lora_rank:
            base = "NF4 base (QLoRA)" if self.quantize_base else "BF16 base"
            parts += [f"LoRA r={self.lora_rank} on {self.lora_targets}, {base}"]
        parts += [f"chunked loss ({self.chunked_loss} tokens)"] if self.chunked_loss else []
        parts += [f"setup: {self.setup}"] if self.setup else []
        parts += [f"tensor parallel {self.tensor_parallel}" + (" + sequence parallel" if self.sequence_parallel
                                                               else "")] if self.tensor_parallel > 1 else []
        parts += [f"{self.pipeline_stages} pipeline stages" + (f" ({self.pipeline_chunks} chunks each, interleaved)"
                                                               if self.pipeline_chunks > 1 else " (1F1B)")
                  ] if self.pipeline_stages > 1 else []
        parts += [f"{self.sharding.upper()} over {self.n_gpus} GPUs"] if self.sharding != "none" else []
        parts += [f"math attention (compute capability {self.capability[0]}.{self.capability[1]})"
                  if self.device == "cuda" else "math attention (Apple GPU)"] if self.attention == "sdpa-math" else []
        parts += ["parameters and optimizer offloaded to the host" if self.offload_parameters else
                  "optimizer offloaded to the host (ZeRO-Offload)"] if self.offload_optimizer else []
        return ", ".join(parts)


def block_parameters(shape: Shape) -> int:
    """Parameters of one transformer block: 12 d^2 in matrices plus 13 d in biases and LayerNorms (a real
    architecture: its layer's, every expert included)."""
    check_instance("shape", shape, SHAPES)
    return _block_parameters(shape)


def _block_parameters(shape: Shape) -> int:
    if isinstance(shape, ArchitectureShape):
        return shape.block_parameters
    return 12 * shape.d_model**2 + 13 * shape.d_model


def _compute_precision(regime: str) -> str:
    """The activations' precision of a regime: FP32, torch.amp's, or BF16 (pure BF16, offload, a frozen base)."""
    return {"fp32": "fp32", "bf16-mixed": "bf16-mixed"}.get(regime, "bf16")


def activation_terms(shape: Shape, micro_batch: int, regime: str, checkpointing: bool, *,
                     chunk_tokens: int = 0, attention: str = "sdpa") -> dict[str, int]:
    """Chapter 01's saved activations for a regime, and backward's transients, each at its largest:
    - saved: what autograd keeps until backward (a BF16 base runs its residual stream in BF16, and its logits
      are up-cast to FP32 for the loss: 2 more bytes per logit than the pure-BF16 formula counts);
    - recomputed block: under checkpointing, backward re-runs one block and holds its activations;
    - logits gradient: the loss's backward holds two FP32 tokens x vocabulary tensors at once (the gradient of the
      log-probabilities, and the gradient of the logits that log-softmax's backward makes from it) beside the
      saved log-probabilities;
    - autocast cache: under torch.amp with checkpointing, the BF16 copies of every block's weights and biases stay in
      autocast's cache until the forward's region exits (checkpointing frees what the blocks save, not the cache);
      `step_moments` places it at the forward's end, where backward's transients are not yet born. With `chunk_tokens` >
      0 (chunked linear-cross-entropy, utils.lessons.chunked_loss) the loss keeps no FP32 logits (tokens x vocabulary x
      4 B leave the saved line) and backward holds one chunk's recomputed logits and their gradients
      (`CHUNK_LOSS_TENSORS` x chunk x vocabulary x 4 B, and the hidden states' FP32 gradient) instead. A real
      architecture (ArchitectureShape) saves `utils.ledger.architectures.activation_bytes` (Hugging Face's loss keeps
      FP32 log-probabilities in every regime: nothing to add), and autocast copies its layers' `cast_parameters`.
      `attention` is SDPA's kernel (`Choice.attention`): "sdpa-math" adds the math kernel's probabilities."""
    check_instance("shape", shape, SHAPES)
    check_int("micro_batch", micro_batch, minimum=1)
    check_bool("checkpointing", checkpointing)
    check_int("chunk_tokens", chunk_tokens, minimum=0)
    check_choice("regime", regime, ("fp32", "bf16-mixed", "bf16", "offload", "bf16-base", "nf4-base"))
    check_choice("attention", attention, ("sdpa", "sdpa-math"))
    return _activation_terms(shape, micro_batch, regime, checkpointing, chunk_tokens=chunk_tokens, attention=attention)


def _activation_terms(shape: Shape, micro_batch: int, regime: str, checkpointing: bool, *,
                     chunk_tokens: int = 0, attention: str = "sdpa") -> dict[str, int]:
    timeline = _activation_timeline(shape, micro_batch, regime, checkpointing, chunk_tokens, attention)
    return {k: timeline[k] for k in ("saved activations", "recomputed block", "logits gradient (FP32)")} | {
        "autocast weight cache": timeline["autocast copies"]}


# Tensors of one chunk x vocabulary a chunked loss holds at once in its backward, in FP32 units
# (utils.lessons.chunked_loss): the chunk's recomputed log-probabilities, their gradient and the logits' gradient (3),
# and a quarter more that the real steps of tests/test_real_steps.py show (the BF16 gradient of part of the chunk);
# beside them the head's gradient, born in the first chunk's backward, and the hidden states' FP32 gradient.
CHUNK_LOSS_TENSORS = 3.25


def _activation_timeline(shape: Shape, micro_batch: int, regime: str, checkpointing: bool,
                         chunk_tokens: int, attention: str = "sdpa") -> dict[str, int]:
    """activation_terms' lines and what `step_moments` needs besides: the saved FP32 log-probabilities, one layer's
    saved bytes, and the loss's forward transient (the FP32 logits, and the BF16 logits they are cast from)."""
    precision = _compute_precision(regime)
    tokens = micro_batch * shape.seq_len
    tokens_x_vocab = tokens * shape.vocab_size
    if isinstance(shape, ArchitectureShape):
        arch, t = shape.arch, shape.seq_len
        (per_block, outside), (layer, _) = (arch_activation_parts(arch, micro_batch, t, precision, checkpointing=ck,
                                                                  padding_mask=False, attention=attention)
                                            for ck in (False, checkpointing))
        saved = shape.n_layer * layer + outside
        cast_per_block = shape.cast_parameters
    else:
        (per_block, outside), (layer, _) = (gpt_activation_parts(shape, micro_batch, precision=precision,
                                                                 checkpointing=ck, attention=attention, dropout=0.0)
                                            for ck in (False, checkpointing))
        saved = shape.n_layer * layer + outside
        if precision == "bf16":
            saved += 2 * tokens_x_vocab  # FP32 logits for the loss instead of BF16 ones
        cast_per_block = 12 * shape.d_model**2 + 9 * shape.d_model
    logprobs, loss_backward = 4 * tokens_x_vocab, 2 * 4 * tokens_x_vocab
    loss_forward = (4 if precision == "fp32" else 6) * tokens_x_vocab
    hidden = (2 if precision == "bf16" else 4) * tokens * shape.d_model  # the final norm's output
    if isinstance(shape, ArchitectureShape):
        loss_forward += 16 * tokens  # Hugging Face's loss pads and shifts the int64 labels into a new tensor
    if isinstance(shape, ArchitectureShape) and precision == "bf16-mixed":
        loss_forward += 2 * hidden  # FP32 under autocast, held by the model's output while the loss runs (the head
        # saved its BF16 copy instead), and one more FP32 tokens x d tensor a real step shows alive there (measured
        # on a CPU, tests/test_real_steps.py; not attributed tensor by tensor)
    if chunk_tokens:
        saved -= logprobs  # the loss's FP32 log-softmax of every logit is not kept
        chunk = min(chunk_tokens, tokens) * shape.vocab_size
        # one chunk's tensors, the hidden states every chunk's checkpoint keeps, and their FP32 gradient
        logprobs, loss_forward = 0, int(CHUNK_LOSS_TENSORS * 4 * chunk) + hidden
        loss_backward = loss_forward + 4 * tokens * shape.d_model
    wide = shape.arch.d_ff if isinstance(shape, ArchitectureShape) else 4 * shape.d_model
    # a layer's backward: the gradient of its widest activation (the MLP's) being made, and the residual stream's
    in_flight = tokens * max(wide, shape.d_model) * (4 if precision == "fp32" else 2) + hidden
    copies = 2 * shape.n_layer * cast_per_block if checkpointing and precision == "bf16-mixed" else 0
    return {"saved activations": saved, "recomputed block": per_block if checkpointing else 0,
            "logits gradient (FP32)": loss_backward, "autocast copies": copies, "log-probabilities": logprobs,
            "per layer": layer, "loss forward": loss_forward, "in flight": in_flight}


def _moments_bytes(lines: dict[str, float], optimizer: str) -> float:
    """Bytes per parameter of `optimizer`'s state in a setup whose AdamW moments take lines["moments"] (their
    element size is half of it: AdamW in FP32 8, in BF16 4)."""
    return _optimizer_state_bytes_per_param(optimizer, int(lines["moments"] // 2))


def memory_of(shape: Shape, choice: Choice) -> dict[str, int]:
    """The budget ledger: bytes per GPU of each part of one training step under `choice`, for the course's GPT
    (TransformerShape) or a real architecture (utils.ledger.architectures.ArchitectureShape), at the step's peak: the
    lines of the moment of `step_moments` that holds the most (the same line names at every moment, 0 where a line
    holds nothing then). With tensor or pipeline parallelism, the most loaded GPU's (`model_parallel_terms`), each
    line at its largest over the step: an upper bound, since no run of this course can meter that timeline."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _memory_of(shape, choice)


def _memory_of(shape: Shape, choice: Choice) -> dict[str, int]:
    if choice.tensor_parallel > 1 or choice.pipeline_stages > 1:
        return _model_parallel_terms(shape, choice, _largest_lines(_moments(shape, choice)))
    return _peak_moment(_moments(shape, choice))[1]


def step_moments(shape: Shape, choice: Choice) -> dict[str, dict[str, int]]:
    """The ledger at each moment of one training step where its peak can fall (the last micro-batch, with the
    earlier micro-batches' gradients alive when accumulating), per GPU of one replica:
    - "forward's end": the saved activations, the loss's FP32 logits beside their log-probabilities and, under
      torch.amp with checkpointing, autocast's cache of BF16 weight copies (freed when the region exits);
    - "loss backward": the saved activations and two FP32 tokens x vocabulary gradients (of the
      log-probabilities and of the logits) beside the saved log-probabilities: 3 such tensors at once;
    - "first layer's backward": the log-probabilities are gone, the head's gradient is born, and under
      checkpointing the last layer's activations are recomputed;
    - "last layer's backward": every other gradient is born, one layer's activations are left (and recomputed);
    - "optimizer step": all gradients, no activation, and the step's temporaries (AdamW's multi-tensor step, the
      CUDA default, keeps one moment-sized temporary per parameter: torch/optim/adam.py `_multi_tensor_adam`'s
      `exp_avg_sq_sqrt = torch._foreach_sqrt(...)`).
    Gradients are not counted before they exist: a single micro-batch's are born during backward while the
    activations are freed (the peak of a timeline, not a sum of each line's largest). Two habits are assumed, as
    Hugging Face's Trainer has them: gradients set to None after each step, and the logits not kept through backward
    (a loop holding `logits` or the model's output while calling backward keeps a fourth tokens x vocabulary tensor
    at the loss: 2 B per element under autocast, 4 in FP32)."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _moments(shape, choice)


def peak_moment(shape: Shape, choice: Choice) -> str:
    """The moment of `step_moments` at which the step peaks (the ledger `memory_of` gives its lines)."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    if choice.tensor_parallel > 1 or choice.pipeline_stages > 1:
        return "each line at its largest (model parallel)"
    return _peak_moment(_moments(shape, choice))[0]


def line_maxima(shape: Shape, choice: Choice) -> dict[str, int]:
    """Each line of the ledger at its largest over the step (the moments of `step_moments`): a sum of these is an
    upper bound that counts lines that never coexist (a single micro-batch's gradients beside all its
    activations); `memory_of` is the peak of the timeline instead."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _largest_lines(_moments(shape, choice))


def _peak_moment(moments: dict[str, dict[str, int]]) -> tuple[str, dict[str, int]]:
    return max(moments.items(), key=lambda kv: sum(kv[1].values()))


def _largest_lines(moments: dict[str, dict[str, int]]) -> dict[str, int]:
    lines = next(iter(moments.values()))
    return {k: max(m[k] for m in moments.values()) for k in lines}


def _zero_offload(choice: Choice) -> bool:
    """Whether `choice` is ZeRO-Offload as DeepSpeed's stage_1_and_2.py runs it (the optimizer on the host, ZeRO
    stage 0-2, the weights on the GPU), whose buffers this ledger counts line by line (REDUCE_BUCKET_ELEMENTS)."""
    return choice.offload_optimizer and not choice.offload_parameters and choice.sharding != "zero3"


def _sharded_amp(choice: Choice) -> bool:
    """torch.amp under ZeRO-1/2 trains as DeepSpeed's BF16 mode does: BF16 weights on every rank, the FP32 master
    weights sharded with the gradients and Adam's moments (utils.ledger.setups' "deepspeed zero-2 bf16"), not FP32
    weights replicated (FSDP, ZeRO-3, shards them too)."""
    return choice.precision == "bf16-mixed" and choice.sharding in ("zero1", "zero2") and not (
        choice.lora_rank or choice.offload_optimizer or choice.setup)


def _moments(shape: Shape, choice: Choice) -> dict[str, dict[str, int]]:
    """step_moments' lines, on one GPU of one model replica (data parallelism and ZeRO over `choice.n_gpus`)."""
    n, d, n_gpus = shape.n_params, shape.d_model, choice.n_gpus
    block = _block_parameters(shape)
    regime = choice.regime
    staging = norm_copy = 0  # ZeRO-Offload's buffers (below)
    if choice.lora_rank:
        trainable = _lora_parameters(shape, choice.lora_rank, choice.lora_targets)
        base, adapters = _setup_lines(LORA_BASE_SETUP), _setup_lines(ADAPTER_SETUP)
        if choice.quantize_base:
            matrices = shape.n_layer * (shape.matrix_parameters if isinstance(shape, ArchitectureShape)
                                        else 12 * d * d)
            weights = NF4_BYTES_PER_PARAM * matrices + base["weights"] * (n - matrices)
        else:
            weights = base["weights"] * n
        weights += adapters["weights"] * trainable
        grads = adapters["gradients"] * trainable
        states = (adapters["master"] + _moments_bytes(adapters, choice.optimizer)) * trainable
        states += _optimizer_state_overhead(shape, choice, _moments_bytes(adapters, choice.optimizer))
        moment_size = _moments_bytes(adapters, choice.optimizer) / 2
    elif choice.offload_optimizer:  # BF16 weights on the GPU; DeepSpeed's BF16 gradient bucket, and the block whose
        trainable = 0  # gradients backward is producing before they are copied into it; the step runs on the host
        weights, states, moment_size = _setup_lines(OFFLOAD_SETUP)["weights"] * n, 0, 0.0
        grads = 2 * (REDUCE_BUCKET_ELEMENTS + block)
        if choice.offload_parameters:  # only the block in use and the prefetched next one
            weights = 2 * 2 * max(block, shape.vocab_size * d)
        elif _zero_offload(choice):  # the buffers of REDUCE_BUCKET_ELEMENTS' comment, around the largest parameter
            largest = max(_parameter_tensor_sizes(shape, choice))
            grads += 2 * largest if largest > REDUCE_BUCKET_ELEMENTS else 0
            staging, norm_copy = 2 * largest, 11 * largest
    else:
        trainable = n
        lines = _setup_lines(choice.setup or ("deepspeed zero-2 bf16" if _sharded_amp(choice)
                                             else PRECISION_SETUPS[choice.precision]))
        weights, grads = lines["weights"] * n, lines["gradients"] * n
        master, states = lines["master"] * n, _moments_bytes(lines, choice.optimizer) * n
        states += _optimizer_state_overhead(shape, choice, _moments_bytes(lines, choice.optimizer))
        moment_size = _moments_bytes(lines, choice.optimizer) / 2
        if _sharded_amp(choice):
            regime = "bf16"  # DeepSpeed's BF16 mode runs the module in BF16
        states += master
    gathered = 0
    if choice.sharding in ("zero1", "zero2", "zero3"):
        states /= n_gpus
        trainable /= n_gpus  # each rank steps its shard
    if choice.sharding in ("zero2", "zero3") and not _zero_offload(choice):  # (its buffers are whole on every rank)
        grads /= n_gpus
    if choice.sharding == "zero3" and not choice.offload_parameters:  # (with parameter offload the weights
        weights /= n_gpus  # line already is the blocks in use, gathered: they are not counted twice)
        gathered = 2 * 2 * block  # the all-gathered block and the prefetched next one, in BF16
    acts = _activation_terms(shape, choice.micro_batch, regime, choice.checkpointing,
                            chunk_tokens=choice.chunked_loss, attention=choice.attention)
    timeline = _activation_timeline(shape, choice.micro_batch, regime, choice.checkpointing, choice.chunked_loss,
                                    choice.attention)
    copies = 0 if choice.sharding == "zero3" else timeline["autocast copies"]  # FSDP2 gathers BF16 weights itself
    # Gradients alive when the last micro-batch's backward starts: the earlier micro-batches' (accumulated in
    # place), or a persistent shard; those born during backward: the head's first, then every layer's.
    persistent = choice.sharding in ("zero2", "zero3") or choice.offload_optimizer
    before = grads if choice.accumulation > 1 or persistent else 0
    head = 0 if before or choice.lora_rank else grads * (shape.vocab_size * d) / n
    # the embeddings' gradients are born last, after the first layer's backward (a tied table's with the head's)
    tied = isinstance(shape, ArchitectureShape) and shape.arch.tied_embeddings
    embeddings = shape.vocab_size * d + (0 if isinstance(shape, ArchitectureShape) else shape.seq_len * d)
    unborn = 0 if before or choice.lora_rank or tied else grads * embeddings / n
    own = 0 if before or choice.lora_rank else grads * block / n  # a layer's gradients, born in its backward
    in_flight = timeline["in flight"]
    step_temporaries = int(_step_temporary_bytes(shape, choice, trainable, moment_size))
    lora = 0
    if choice.lora_rank:  # each adapter saves its rank-r intermediate (FP32)
        per_layer = (shape.adapters_per_token if isinstance(shape, ArchitectureShape)
                     else {"attention": 4, "attention+mlp": 6})[choice.lora_targets]
        lora = shape.n_layer * per_layer * choice.micro_batch * shape.seq_len * choice.lora_rank * 4
    dequantized = 0
    if choice.quantize_base:  # linear_nf4 dequantizes one matrix at a time to BF16
        dequantized = 2 * (shape.largest_matrix if isinstance(shape, ArchitectureShape) else 4 * d * d)

    def moment(gradients: float, saved: float, recomputed: float = 0, loss: float = 0, cache: float = 0,
               step: float = 0, lora_held: float = 0, nf4: float = 0, logits: float = 0,
               norm: float = 0) -> dict[str, int]:
        parts = {"weights": int(weights), "gradients": int(gradients), "optimizer states": int(states)}
        if gathered:
            parts["gathered blocks (ZeRO-3)"] = gathered
        if staging:
            parts |= {"offload staging buffer": int(staging), "gradient norm and overflow check": int(norm)}
        parts |= {"saved activations": int(saved), "recomputed block": int(recomputed),
                  "logits (FP32, loss forward)": int(logits), "logits gradient (FP32)": int(loss),
                  "autocast weight cache": int(cache),
                  "optimizer step temporaries": int(step)}
        if choice.lora_rank:
            parts["LoRA intermediates"] = int(lora_held)
            if choice.quantize_base:
                parts["dequantized matrix (NF4)"] = int(nf4)
        return parts

    batch = BATCH_BYTES_PER_TOKEN * choice.micro_batch * shape.seq_len * (choice.accumulation - 1)  # the other
    # micro-batches' ids and targets, which the loop holds for the whole optimizer step
    saved = acts["saved activations"] + batch
    logprobs, layer = timeline["log-probabilities"], timeline["per layer"]
    # the first layer's backward: its own saved tensors (recomputed under checkpointing), the batch's ids and
    # targets that the embedding's backward and the loop hold; the layers above and the head have freed theirs
    one_layer = layer + BATCH_BYTES_PER_TOKEN * choice.micro_batch * shape.seq_len + batch
    recomputed = acts["recomputed block"]
    lora_layer = lora / shape.n_layer
    return {
        "forward's end": moment(before, saved, logits=timeline["loss forward"], cache=copies, lora_held=lora,
                                nf4=dequantized),
        "loss backward": moment(before + (head if choice.chunked_loss else 0), saved,
                                loss=acts["logits gradient (FP32)"], lora_held=lora),
        "first layer's backward": moment(before + head + own, saved - logprobs + in_flight, recomputed, lora_held=lora,
                                         nf4=dequantized, norm=norm_copy),
        "last layer's backward": moment(grads - unborn, one_layer + in_flight, recomputed, lora_held=lora_layer,
                                        nf4=dequantized, norm=norm_copy),
        "optimizer step": moment(grads, batch + BATCH_BYTES_PER_TOKEN * choice.micro_batch * shape.seq_len,
                                 step=step_temporaries),
    }


def parameter_tensor_sizes(shape: Shape, choice: Choice) -> list[int]:
    """The sizes (elements) of the tensors the optimizer steps under `choice`: every parameter of the model (the
    course's GPT: two embeddings, 12 per block, the final LayerNorm and the head; a real architecture: its embedding,
    attention, experts, router, norms and head), or under LoRA each adapter's A (r x d_in) and B (d_out x r)."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _parameter_tensor_sizes(shape, choice)


def _parameter_tensor_sizes(shape: Shape, choice: Choice) -> list[int]:
    d, v, r = shape.d_model, shape.vocab_size, choice.lora_rank
    if isinstance(shape, ArchitectureShape):
        a = shape.arch
        kv, f = a.kv_dim, a.d_ff
        attention = [(d, d), (d, kv), (d, kv), (d, d)]
        mlp = [(d, f), (d, f), (f, d)] * a.n_experts
        if r:
            pairs = attention + (mlp if choice.lora_targets == "attention+mlp" else [])
            return [size for d_in, d_out in pairs for size in (r * d_in, d_out * r)] * a.n_layer
        layer = [i * o for i, o in attention + mlp] + [d, d] + ([d, kv, kv] if a.qkv_bias else [])
        layer += [a.n_experts * d] if a.n_experts > 1 else []
        return [v * d] + layer * a.n_layer + [d] + ([] if a.tied_embeddings else [v * d])
    if r:
        pairs = [(d, d)] * 4  # the attention's q, k, v and output projections (as lora_parameters counts them)
        pairs += [(d, 4 * d), (4 * d, d)] if choice.lora_targets == "attention+mlp" else []
        return [size for d_in, d_out in pairs for size in (r * d_in, d_out * r)] * shape.n_layer
    block = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    return [v * d, shape.seq_len * d] + block * shape.n_layer + [d, d, v * d]


# torchao's 8-bit and 4-bit AdamW quantize a state only for tensors of at least 4,096 elements that divide into its
# blocks (torchao/optim/adam.py `_new_buffer`, after bitsandbytes); each quantized moment keeps a lookup table of
# 256 (8-bit) or 16 (4-bit) FP32 values. Every Adam keeps a 4-byte step counter per tensor.
_QUANTIZED = {"adamw8bit": (256, 256), "adamw4bit": (128, 16)}  # optimizer: (block, lookup-table values)


def optimizer_state_overhead(shape: Shape, choice: Choice, state_per_param: float) -> float:
    """Optimizer-state bytes beyond `state_per_param` x the trainable parameters (the per-parameter bytes of the
    moments): AdamW's 4-byte step counter per tensor, and under torchao the FP32 states of the small tensors it does
    not quantize and the lookup tables of those it does. A few KiB to MiB: bookkeeping, not a lesson."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    check_number("state_per_param", state_per_param, minimum=0.0)
    return _optimizer_state_overhead(shape, choice, state_per_param)


def _optimizer_state_overhead(shape: Shape, choice: Choice, state_per_param: float) -> float:
    if choice.optimizer in ("sgd", "sgd-momentum"):
        return 0.0
    sizes = _parameter_tensor_sizes(shape, choice)
    extra = 4.0 * len(sizes)
    if choice.optimizer in _QUANTIZED:
        block, table = _QUANTIZED[choice.optimizer]
        for size in sizes:
            quantized = size >= 4096 and size % block == 0
            extra += 2 * 4 * table if quantized else (8 - state_per_param) * size
    return extra


BATCH_BYTES_PER_TOKEN = 20  # the batch a training loop holds through the step: int64 ids and targets, and scalars
# (chapter 01's formula counts the same 20 B per token of the micro-batch among the saved activations)


def _step_temporary_bytes(shape: Shape, choice: Choice, trainable: float, moment_size: float) -> float:
    """The optimizer step's temporaries: AdamW's multi-tensor step (the CUDA default) keeps one moment-sized tensor
    per trainable parameter (the square root of the second moment); torchao's 8-bit and 4-bit AdamW step one
    tensor at a time (`single_param_adam`), in FP32: the weight, the dequantized moments and their updates, 6 FP32
    copies of the largest tensor when the step runs eagerly (measured on a CPU, tests/test_real_steps.py; compiled
    on a GPU it fuses some of them away: an upper bound there); SGD updates in place."""
    if not trainable or choice.optimizer in ("sgd", "sgd-momentum"):
        return 0
    if choice.optimizer in ("adamw", "adam"):
        return moment_size * trainable
    shards = choice.n_gpus if choice.sharding != "none" else 1  # each rank steps its shard of every tensor
    return 6 * 4 * max(_parameter_tensor_sizes(shape, choice)) / shards


def replicated_layer_bytes(shape: Shape, micro_batch: int, precision: str) -> int:
    """The bytes of one layer's saved activations that tensor parallelism does not split (Korthikanti et al.'s
    10 sbh, less the dropout masks this ledger does not have): the two norms' inputs (the residual stream) and
    statistics, and their outputs, which are the inputs of the column-parallel q/k/v and MLP-in matrices; the
    rest (q, k, v, attention, the MLP's wide tensors, autocast's copies of the split matrices) divides by t."""
    check_instance("shape", shape, SHAPES)
    check_int("micro_batch", micro_batch, minimum=1)
    check_choice("precision", precision, ("fp32", "bf16-mixed", "bf16"))
    return _replicated_layer_bytes(shape, micro_batch, precision)


def _replicated_layer_bytes(shape: Shape, micro_batch: int, precision: str) -> int:
    n, d = micro_batch * shape.seq_len, shape.d_model
    a = 2 if precision == "bf16" else 4  # the residual stream
    c = 4 if precision == "fp32" else 2  # the compute dtype
    if isinstance(shape, ArchitectureShape):  # Hugging Face's RMSNorm keeps its FP32 up-cast input and the
        # normalized tensor, and each column-parallel matrix its own input: per token, BF16 2 x (4 + 2 + 2) d; FP32
        # 2 x (4 + 4 + 4) d; under autocast 2 x (4 + 4) d plus a BF16 copy of the norm's output for q, k, v, gate and
        # up (5 x 2 d): 16, 24 and 26 d; and one FP32 rsqrt per token per norm
        return n * ({"bf16": 16, "fp32": 24, "bf16-mixed": 26}[precision] * d + 8)
    return 2 * a * n * d + 4 * a * n + 2 * c * n * d  # LayerNorm: mean and rstd per token each


def state_share(shape: Shape, choice: Choice) -> float:
    """The fraction of the model's parameters one GPU holds under `choice`'s tensor (t) and pipeline (p)
    parallelism: an end stage's L/p layers and half the parameters outside the layers (the embedding on the first
    stage, the head on the last; a tied table on both), divided by t. 1.0 without either."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _state_share(shape, choice)


def _state_share(shape: Shape, choice: Choice) -> float:
    t, p = choice.tensor_parallel, choice.pipeline_stages
    if t == p == 1:
        return 1.0
    layers = shape.n_layer * _block_parameters(shape)
    tied = isinstance(shape, ArchitectureShape) and shape.arch.tied_embeddings
    outer = shape.n_params - layers
    return (layers / p + outer * (1 if tied or p == 1 else 0.5)) / shape.n_params / t


def model_parallel_terms(shape: Shape, choice: Choice, parts: dict[str, int]) -> dict[str, int]:
    """The ledger `parts` of one whole replica on one GPU, spread over `choice.tensor_parallel` (t) and
    `choice.pipeline_stages` (p) GPUs; the most loaded stage's lines (the first or the last). Following Korthikanti
    et al. 2022 (arXiv:2205.05198, section 4; utils.ledger.parallel): a layer's saved activations become
    replicated + rest / t under tensor parallelism and all / t with sequence parallelism (a checkpointed layer's
    input: replicated, or / t with sequence parallelism); under 1F1B the first stage holds min(p, micro-batches) in
    flight through its L/p layers (L layers' worth), the interleaved schedule with m chunks
    L (1 + (p - 1)/(p m)); the last stage holds one micro-batch through its layers, plus the loss's terms (the
    logits vocabulary-parallel: / t); the first stage's embedding keeps only the token ids (8 B per token).
    Model states: each end stage holds its L/p layers and half the parameters outside them (the embedding on the
    first, the head and final norm on the last; a tied table on both), all / t (the norms are in fact replicated:
    a few d per layer, not counted)."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    if not isinstance(parts, dict):
        raise TypeError(f"parts must be a dict of ledger lines (memory_of), got {type(parts).__name__}")
    return _model_parallel_terms(shape, choice, parts)


def _model_parallel_terms(shape: Shape, choice: Choice, parts: dict[str, int]) -> dict[str, int]:
    t, p, m = choice.tensor_parallel, choice.pipeline_stages, choice.pipeline_chunks
    layers, mb = shape.n_layer, choice.micro_batch
    if layers % (p * m):
        raise ValueError(f"pipeline_stages x pipeline_chunks ({p} x {m}) must divide the {layers} layers")
    precision = _compute_precision(choice.regime)
    per_layer = _activation_timeline(shape, mb, choice.regime, choice.checkpointing, choice.chunked_loss,
                                     choice.attention)["per layer"]
    outside = parts["saved activations"] - layers * per_layer
    replicated = _replicated_layer_bytes(shape, mb, precision)
    if choice.checkpointing:  # a layer keeps its input: full on every tensor-parallel rank unless split by SP
        local_layer = per_layer / t if choice.sequence_parallel else per_layer
    else:
        local_layer = per_layer / t if choice.sequence_parallel else replicated + (per_layer - replicated) / t
    in_flight = min(p, choice.accumulation)
    held_first = layers / p * in_flight if m == 1 else layers * (1 + (p - 1) / (p * m)) * in_flight / p
    ids = 8 * mb * shape.seq_len
    share = _state_share(shape, choice)
    stages = []
    for first in ((True, False) if p > 1 else (True,)):
        lines = {k: v * share for k, v in parts.items()
                 if k in ("weights", "gradients", "optimizer states", "optimizer step temporaries")}
        lines |= {k: v / t for k, v in parts.items() if k in ("gathered blocks (ZeRO-3)", "dequantized matrix (NF4)")}
        if p == 1:
            lines["saved activations"] = local_layer * layers + outside / t
        elif first:
            lines["saved activations"] = local_layer * held_first + ids
        else:
            lines["saved activations"] = local_layer * layers / p + (outside - ids) / t
        last = not first or p == 1
        recomputed = parts["recomputed block"]  # a whole layer re-run: its replicated part stays whole without SP
        lines["recomputed block"] = recomputed / t if choice.sequence_parallel or not recomputed else \
            replicated + (recomputed - replicated) / t
        for loss_line in ("logits (FP32, loss forward)", "logits gradient (FP32)"):  # vocabulary-parallel
            lines[loss_line] = parts[loss_line] / t if last else 0
        lines["autocast weight cache"] = parts["autocast weight cache"] / (p * t)
        if "LoRA intermediates" in parts:
            held = layers if p == 1 else (held_first if first else layers / p)
            lines["LoRA intermediates"] = parts["LoRA intermediates"] * held / layers / t
        stages.append({k: int(lines[k]) for k in parts})
    return max(stages, key=lambda s: sum(s.values()))


def host_ram_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the operating system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _pinned_bytes(nbytes: int) -> int:
    """What torch's pinned (page-locked) host allocator takes for a block of `nbytes`: the next power of two
    (ATen/core/CachingHostAllocator.h, torch 2.13; its pinned_max_round_threshold is unbounded by default)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


def host_memory_of(shape: Shape, choice: Choice) -> dict[str, int]:
    """Host RAM per GPU process that `choice` keeps there (the program, its data and the CUDA driver's own pinned
    memory aside), as DeepSpeed v0.19.5 allocates it. Every optimizer offload: the FP32 master weights (4 B/param),
    their FP32 gradient (4) and the optimizer's states (AdamW 8, or 8-bit/4-bit as chosen). ZeRO-Offload
    (stage_1_and_2.py, REDUCE_BUCKET_ELEMENTS' comment) adds a BF16 copy of the weights that stages the update (2),
    with accumulation a BF16 buffer per parameter where the micro-batches' gradients add up (2), and a staging
    buffer as large as the largest parameter; all but the states are pinned, each block rounded up to a power of two
    (`_pinned_bytes`; one parameter group's flat buffers). Parameter offload and ZeRO-3 (stage3.py) add a pinned flat
    buffer of gradient partitions in the model's dtype, BF16 (`grad_partitions_flat_buffer`, 2), and with parameter
    offload the pinned BF16 weights the GPU fetches block by block (`param_groups_fp16_flat_cpu_memory`, 2); their
    FP32 master weights are not pinned. Under ZeRO sharding each process offloads its 1/N share. Without offload: no
    line."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    return _host_memory_of(shape, choice)


def _host_memory_of(shape: Shape, choice: Choice) -> dict[str, int]:
    if not choice.offload_optimizer:
        return {}
    n, share = shape.n_params, choice.n_gpus if choice.sharding != "none" else 1
    lines = _setup_lines(OFFLOAD_SETUP)
    master, gradients, bf16 = (int(lines[k] * n) // share for k in ("master", "gradients", "weights"))
    states = int(_moments_bytes(lines, choice.optimizer) * n) // share
    if _zero_offload(choice):
        sizes = _parameter_tensor_sizes(shape, choice)
        parts = {"FP32 master weights": _pinned_bytes(master), "FP32 gradient buffer": _pinned_bytes(gradients),
                 "optimizer states": states, "BF16 weights (staging the update)": _pinned_bytes(bf16)}
        if choice.accumulation > 1:  # one buffer per parameter (its share under ZeRO-1/2)
            parts["BF16 gradient accumulation"] = sum(_pinned_bytes(int(lines["weights"] * size) // share)
                                                      for size in sizes)
        parts["offload staging buffer"] = _pinned_bytes(2 * max(sizes))
        return parts
    parts = {"FP32 master weights": master, "FP32 gradient buffer": gradients, "optimizer states": states,
             "BF16 gradient partitions": _pinned_bytes(bf16)}
    if choice.offload_parameters:
        parts["BF16 weights (parameter offload)"] = _pinned_bytes(bf16)
    return parts


def zero_bytes_per_gpu(n_params: int, stage: int, n_gpus: int, accounting: str = "zero-paper") -> float:
    """Model states per GPU (weights, gradients, optimizer states; no activations) under ZeRO stage 0-3.
    "zero-paper": Rajbhandari et al. 2020's mixed precision (FP16 weights 2, FP16 gradients 2, K = 12 bytes of
    FP32 master weights and Adam moments); "torch.amp": FP32 weights 4, FP32 gradients 4, Adam moments 8."""
    check_int("n_params", n_params, minimum=1)
    check_choice("stage", stage, (0, 1, 2, 3))
    check_int("n_gpus", n_gpus, minimum=1)
    check_choice("accounting", accounting, ("zero-paper", "torch.amp"))
    w, g, k = (2, 2, 12) if accounting == "zero-paper" else (4, 4, 8)
    if stage >= 1:
        k = k / n_gpus
    if stage >= 2:
        g = g / n_gpus
    if stage >= 3:
        w = w / n_gpus
    return (w + g + k) * n_params


def costs(shape: Shape, choice: Choice, pcie_gb_per_s: float = PCIE_GB_PER_S) -> dict[str, float]:
    """What a choice costs instead of memory, per optimizer step of `choice.accumulation` micro-batches, on the
    schedule that `memory_of` holds (a gradient shard, or a one-block gradient bucket, cannot wait for the end of
    accumulation: it is reduced or sent away after every micro-batch's backward):
    - recompute: checkpointing re-runs each block's forward: about 1/3 more compute for the blocks
      (a forward is about 1/3 of forward + backward);
    - communication bytes per GPU (ring collectives, (N-1)/N of the data each way): DDP and ZeRO-1 keep full
      gradients through accumulation (no_sync) and all-reduce them once per step, 2 (N-1)/N x the gradients;
      ZeRO-2 reduce-scatters the gradients after every micro-batch and all-gathers the updated weights once,
      (accumulation + 1) (N-1)/N x the gradients' bytes; ZeRO-3 all-gathers the weights in forward and in
      backward and reduce-scatters the gradients, every micro-batch: 3 x accumulation x (N-1)/N x the gradients'
      bytes (every collective counted at the gradients' width, so that the stages compare like with like: with
      one micro-batch ZeRO-3 moves 1.5x DDP's bytes, the ZeRO paper's 3 vs 2 times the model, section 7.2.2;
      FSDP2 with MixedPrecisionPolicy(param_dtype=torch.bfloat16) gathers and reduces in BF16, half of it).
      (FSDP2's other schedule, full gradients kept until the last micro-batch, costs what DDP costs in
      communication and full gradients in memory: chapter 06);
    - PCIe bytes: ZeRO-Offload (DeepSpeed's stage_1_and_2.py) sends each micro-batch's BF16 gradients to the host
      and, from the second micro-batch on, brings the host's running sum back up to add to (2 B/param each way),
      sends the FP32 sum at the last micro-batch (4 B/param; alone, with one micro-batch per step) and brings the
      updated BF16 weights up once per step (2 B/param): 4 x accumulation + 4 B/param per step, 6 with one
      micro-batch, each rank its 1/N share under ZeRO-1/2. Parameter offload and ZeRO-3 (stage3.py,
      `partition_grads`) move each micro-batch's gradient partition down and back up (the first) or up and back
      down (the others), 4 B/param, and the FP32 sum down at the last (4); parameter offload brings the weights up
      in forward and again in backward of every micro-batch (4 B/param per micro-batch), ZeRO-3 alone the updated
      weights once (2); others: none;
    - PCIe seconds at `pcie_gb_per_s` (decimal GB/s);
    - with tensor parallelism (t > 1), "tensor-parallel bytes" per GPU: 4 ring all-reduces of a micro-batch's
      activations per layer (6 with checkpointing), 2 (t - 1)/t x tokens x d each, over the stage's layers;
    - with pipeline stages (p > 1), "pipeline bytes": each micro-batch's activation out and its gradient back
      (2 x tokens x d, split over the t ranks), m times with m interleaved chunks per stage (Narayanan et al. 2021,
      section 2.2.2). The data-parallel lines count the parameters one GPU holds."""
    check_instance("shape", shape, SHAPES)
    check_instance("choice", choice, Choice)
    check_number("pcie_gb_per_s", pcie_gb_per_s, positive=True)
    n = shape.n_params if not choice.lora_rank else _lora_parameters(shape, choice.lora_rank, choice.lora_targets)
    n_gpus, micro = choice.n_gpus, choice.accumulation
    ring = (n_gpus - 1) / n_gpus
    # gradients as memory_of keeps them: FP32 adapters under LoRA, FP32 under torch.amp, BF16 in pure BF16
    grad_size = 4 if choice.lora_rank or (choice.precision in ("fp32", "bf16-mixed")
                                          and not choice.offload_optimizer) else 2
    if choice.setup:  # a named setup's gradients (Megatron's FP32 main gradients, DeepSpeed's FP32 ones)
        grad_size = _setup_lines(choice.setup)["gradients"]
    n *= _state_share(shape, choice)  # the parameters one GPU holds under tensor / pipeline parallelism
    if n_gpus == 1:
        comm = 0.0
    elif choice.sharding == "zero3":
        comm = 3 * micro * ring * grad_size * n
    elif choice.sharding == "zero2":
        comm = (micro + 1) * ring * grad_size * n
    else:
        comm = 2 * ring * grad_size * n
    pcie = 0.0
    if _zero_offload(choice):  # gradients down and the running sum up, the FP32 sum down, the weights up: each
        # rank moves its partition's only under ZeRO-1/2 (stage_1_and_2.py copies `is_param_in_current_partition`)
        pcie = ((4.0 * micro + 2 if micro > 1 else 4.0) + 2.0) * shape.n_params
        pcie /= n_gpus if choice.sharding != "none" else 1
    elif choice.offload_optimizer:  # stage3.py: each micro-batch's partition down and up, the FP32 sum down
        pcie = (4.0 * micro + 4) * shape.n_params
        pcie += 2 * 2.0 * shape.n_params * micro if choice.offload_parameters else 2.0 * shape.n_params
    out = {"recompute %": 100 / 3 if choice.checkpointing else 0.0, "communication bytes": comm,
           "PCIe bytes": pcie, "PCIe seconds": pcie / (pcie_gb_per_s * 1e9)}
    t, p = choice.tensor_parallel, choice.pipeline_stages
    activation = choice.micro_batch * shape.seq_len * shape.d_model * (4 if choice.precision == "fp32" else 2)
    if t > 1:  # per layer, 2 all-reduces in forward and 2 in backward (+2 when checkpointing re-runs forward);
        # sequence parallelism trades each for an all-gather and a reduce-scatter of the same volume
        per_layer = (4 + (2 if choice.checkpointing else 0)) * 2 * (t - 1) / t * activation
        out["tensor-parallel bytes"] = per_layer * shape.n_layer / p * micro
    if p > 1:  # a stage sends its output forward and receives its gradient back, split over the t ranks
        out["pipeline bytes"] = 2 * activation / t * micro * choice.pipeline_chunks  # interleaving: m crossings
    return out


@dataclass
class Plan:
    choice: Choice
    parts: dict[str, int]
    budget: int
    steps: list[str] = field(default_factory=list)
    history: list[tuple[str, int]] = field(default_factory=list)  # (step, total bytes per GPU), in order
    host_parts: dict[str, int] = field(default_factory=dict)  # host RAM per GPU process (host_memory_of)
    host_budget: int | None = None  # the host RAM the plan was checked against (None: not checked)
    history_parts: list[tuple[str, dict[str, int]]] = field(default_factory=list)  # each step's ledger, in order

    @property
    def host_total(self) -> int:
        return sum(self.host_parts.values())

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


def _largest_micro_batch(shape: Shape, choice: Choice, budget: int, effective: int) -> Choice:
    """The largest power-of-two micro-batch dividing the effective batch that fits (or 1)."""
    micro = 1
    while micro * 2 <= effective and effective % (micro * 2) == 0:
        trial = replace(choice, micro_batch=micro * 2, accumulation=effective // (micro * 2))
        if sum(_memory_of(shape, trial).values()) > budget:
            break
        micro *= 2
    return replace(choice, micro_batch=micro, accumulation=effective // micro)


def plan(shape: Shape, budget_bytes: int, effective_batch: int, *, n_gpus: int = 1,
         allow_lora: bool = True, lora_rank: int = 16, allow_offload: bool = True,
         host_bytes: int | None = None, chunked_loss: int = 0, tensor_parallel: int = 1,
         pipeline_stages: int = 1, capability: tuple[int, int] | None = None, device: str = "cuda") -> Plan:
    """The least intrusive configuration that fits `budget_bytes` per GPU (use `usable_budget` for a GPU), with the
    reasoning of each step. `effective_batch` is the sequences each GPU trains per optimizer step (micro-batch x
    accumulation); with data parallelism over `n_gpus` the global batch is n_gpus times it. Order: BF16 mixed
    precision, checkpointing, accumulation, sharding (n_gpus > 1: ZeRO-1, 2, 3, exact arithmetic), 8-bit AdamW,
    optimizer offload, parameter offload
    (still full fine-tuning), then LoRA on a BF16 base and QLoRA on an NF4 base (a different training: only adapters
    learn). An offload plan is tried only if its host ledger (`host_memory_of`, per GPU process, times the processes
    of one host: `n_gpus`) fits `host_bytes` of host RAM (default: this machine's, `host_ram_bytes()`). With
    `chunked_loss` > 0 the plan tries a chunked linear-cross-entropy of that many tokens per chunk right after
    checkpointing (0: not offered). `tensor_parallel` and `pipeline_stages` fix a model-parallel layout for every
    step (`n_gpus` data-parallel replicas of t x p GPUs each); offload is then not tried (this ledger does not model
    it with them). `capability` is the target GPU's compute capability (`Choice.capability`): below 8.0 (a T4, a
    V100) the BF16 steps count SDPA's math kernel, which keeps the attention probabilities; `device` "mps" (an Apple
    GPU) counts it in every precision (`Choice.device`)."""
    check_instance("shape", shape, SHAPES)
    check_int("budget_bytes", budget_bytes, minimum=1)
    check_int("effective_batch", effective_batch, minimum=1)
    check_int("n_gpus", n_gpus, minimum=1)
    check_bool("allow_lora", allow_lora)
    check_int("lora_rank", lora_rank, minimum=1)
    check_bool("allow_offload", allow_offload)
    if host_bytes is not None:
        check_int("host_bytes", host_bytes, minimum=1)
    check_int("chunked_loss", chunked_loss, minimum=0)
    check_int("tensor_parallel", tensor_parallel, minimum=1)
    check_int("pipeline_stages", pipeline_stages, minimum=1)
    host = host_bytes if host_bytes is not None else host_ram_bytes()
    steps: list[str] = []
    history: list[tuple[str, int]] = []
    history_parts: list[tuple[str, dict[str, int]]] = []

    def host_fits(c: Choice, what: str) -> bool:
        need = sum(_host_memory_of(shape, c).values()) * n_gpus
        if host is None or need <= host:
            return True
        steps.append(f"{what} skipped: its host ledger needs {need / GIB:.0f} GiB of host RAM, "
                     f"more than the {host / GIB:.0f} GiB available")
        return False

    # one unit for the whole plan, the largest that shows the budget as at least 1 (a small model's plan in MiB)
    unit, scale = next((u, b) for u, b in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
                       if budget_bytes >= b or b == 1)

    def note(reason: str, c: Choice) -> Plan:
        parts = _memory_of(shape, c)
        p = Plan(c, parts, budget_bytes, steps, history, _host_memory_of(shape, c), host, history_parts)
        history.append((reason, p.total))
        history_parts.append((reason, parts))
        big = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
        detail = ", ".join(f"{k} {v / scale:.1f}" for k, v in big)
        steps.append(f"{reason}: {p.total / scale:.1f} {unit} per GPU (largest: {detail}) -> "
                     f"{'fits' if p.fits else 'does not fit'} in {budget_bytes / scale:.1f} {unit}")
        return p

    def widest(c: Choice, p: Plan) -> Plan:
        """Once a configuration fits, take the largest micro-batch that still does (fewer accumulation steps)."""
        best = _largest_micro_batch(shape, replace(c, micro_batch=1, accumulation=effective_batch),
                                    budget_bytes, effective_batch)
        if best.micro_batch <= c.micro_batch or sum(_memory_of(shape, best).values()) > budget_bytes:
            return p
        return note(f"the largest micro-batch that fits: {best.micro_batch} x {best.accumulation} accumulation", best)

    choice = Choice(micro_batch=effective_batch, n_gpus=n_gpus, tensor_parallel=tensor_parallel,
                    pipeline_stages=pipeline_stages, capability=capability, device=device)
    current = note("full fine-tuning in FP32, whole batch at once", choice)
    if current.fits:
        return current
    choice = replace(choice, precision="bf16-mixed")
    current = note("BF16 mixed precision (torch.amp: FP32 weights, BF16 compute)", choice)
    if current.fits:
        return current
    choice = replace(choice, checkpointing=True)
    current = note("+ activation checkpointing", choice)
    if current.fits:
        return current
    if chunked_loss:
        choice = replace(choice, chunked_loss=chunked_loss)
        current = note(f"+ chunked linear-cross-entropy ({chunked_loss} tokens per chunk: no FP32 logits kept)",
                       choice)
        if current.fits:
            return current
    choice = _largest_micro_batch(shape, replace(choice, micro_batch=1), budget_bytes, effective_batch)
    current = note(f"+ gradient accumulation ({choice.accumulation} micro-batches of {choice.micro_batch})", choice)
    if current.fits:
        return current
    if n_gpus > 1:  # sharding keeps the optimizer exact: tried before 8-bit AdamW changes its arithmetic
        for stage in ("zero1", "zero2", "zero3"):
            choice = replace(choice, sharding=stage)
            current = note(f"+ {stage.upper()} sharding over {n_gpus} GPUs", choice)
            if current.fits:
                return widest(choice, current)
    choice = replace(choice, optimizer="adamw8bit")
    current = note("+ 8-bit AdamW (torchao: 2.03 B/param of state instead of 8)", choice)
    if current.fits:
        return widest(choice, current)
    model_parallel = tensor_parallel > 1 or pipeline_stages > 1
    offload = None if model_parallel else replace(choice, offload_optimizer=True, optimizer="adamw")
    if allow_offload and offload is not None:  # each tried on its own host ledger (parameter offload's is smaller)
        for candidate, name, label in (
                (offload, "optimizer offload", "+ optimizer offload (ZeRO-Offload: BF16 weights on the GPU, FP32 "
                                               "master and Adam on the host)"),
                (replace(offload, offload_parameters=True), "parameter offload",
                 "+ parameter offload (ZeRO-Infinity / FSDP2 CPUOffloadPolicy: only the blocks in use on the GPU)")):
            if host_fits(candidate, name):
                choice = candidate
                current = note(label, choice)
                if current.fits:
                    return widest(choice, current)
    if allow_lora:
        choice = replace(choice, lora_rank=lora_rank, offload_optimizer=False, offload_parameters=False,
                         optimizer="adamw", sharding="none" if n_gpus == 1 else choice.sharding)
        choice = replace(choice, micro_batch=1, accumulation=effective_batch)
        current = note(f"LoRA rank {lora_rank} on the attention projections, frozen BF16 base "
                       f"({_lora_parameters(shape, lora_rank) / 1e6:.1f}M trainable)", choice)
        if current.fits:
            return widest(choice, current)
        choice = replace(choice, quantize_base=True)
        current = note("QLoRA: the frozen base's block matrices in NF4", choice)
        if current.fits:
            return widest(choice, current)
    steps.append("nothing tried fits: a smaller model, a shorter sequence, more GPUs or a larger GPU are left")
    return current


def costs_table(shape: Shape, choice: Choice, pcie_gb_per_s: float = PCIE_GB_PER_S
                ) -> tuple[list[list[str]], list[str]]:
    """`costs` as a small table (rows, headers) with units: recompute share, bytes per GPU per optimizer step."""
    c = costs(shape, choice, pcie_gb_per_s)
    rows = [["recomputation", f"at most {c['recompute %']:.0f}% more block compute (a whole extra forward; "
                              "torch's early stop recomputes less)" if c["recompute %"] else "none"],
            ["communication per GPU", f"{c['communication bytes'] / 1e9:.1f} GB per step"],
            *([["tensor-parallel traffic per GPU", f"{c['tensor-parallel bytes'] / 1e9:.1f} GB per step"]]
              if "tensor-parallel bytes" in c else []),
            *([["pipeline traffic per GPU", f"{c['pipeline bytes'] / 1e9:.2f} GB per step"]]
              if "pipeline bytes" in c else []),
            ["PCIe traffic", f"{c['PCIe bytes'] / 1e9:.1f} GB per step"],
            ["PCIe time", f"{c['PCIe seconds']:.1f} s per step at {pcie_gb_per_s:g} GB/s"]]
    return rows, ["cost", "per optimizer step"]


# Marketed memory of the GPUs workshop hosts rent (GB as sold). A GPU reports less than that as its total memory
# (`utils.ledger.budget.REPORTED_GIB`: a T4 14.7 GiB, an A10G 22.5 GiB), and the CUDA context, cuBLAS workspaces and the
# allocator's fragmentation take some of that too: `GPU_USABLE_BYTES` is `utils.ledger.budget.gpu_budget`, the same
# budget chapter 09's planner uses.
GPU_MEMORY_GB: dict[str, int] = {"T4": 16, "A10G": 24, "A100 40GB": 40, "L40S": 48, "A40": 48, "RTX A6000": 48,
                                 "A100 80GB": 80, "H100": 80, "H200": 141}


GPU_USABLE_BYTES: dict[str, int] = {name: gpu_budget(name) for name in GPU_MEMORY_GB}


@dataclass(frozen=True)
class FitReport:
    estimate: MemoryEstimate  # the ledger at the step's peak folded into parts (activations: every activation line)
    capacity: int
    gpu: str
    parts: dict[str, int] = field(default_factory=dict)  # the ledger line by line (utils.ledger.plan.memory_of)

    @property
    def fits(self) -> bool:
        return self.estimate.total <= self.capacity

    @property
    def margin(self) -> int:
        """Bytes left over (negative: how much is missing)."""
        return self.capacity - self.estimate.total


def will_it_fit(model: str | TransformerShape, batch: int, seq_len: int, *, precision: str = "bf16-mixed",
                optimizer: str = "adamw", checkpointing: bool = False, gpu: str = "A100 80GB") -> FitReport:
    """Chapter 09's budget ledger (`utils.ledger.plan.memory_of`) for a transformer (a preset's name, or a custom
    TransformerShape) at a batch and sequence length, against the same usable budget the planner uses
    (`utils.ledger.budget.gpu_budget`: reported memory less context, workspaces and fragmentation)."""
    if isinstance(model, TransformerShape):
        base = model
    elif isinstance(model, str) and model in PRESETS:
        base = PRESETS[model]
    else:
        raise ValueError(f"model must be a TransformerShape or one of {sorted(PRESETS)}, got {model!r}")
    check_choice("gpu", gpu, tuple(GPU_MEMORY_GB))
    check_int("seq_len", seq_len, minimum=1)
    check_int("batch", batch, minimum=1)
    check_choice("precision", precision, ("fp32", "bf16-mixed", "bf16"))
    shape = TransformerShape(base.n_layer, base.d_model, base.n_head, seq_len, base.vocab_size)
    parts = _memory_of(shape, Choice(precision=precision, checkpointing=checkpointing, micro_batch=batch,
                                    optimizer=optimizer))
    weights, grads, states = parts["weights"], parts["gradients"], parts["optimizer states"]
    temporaries, total = parts["optimizer step temporaries"], sum(parts.values())
    est = MemoryEstimate(weights, grads, states, total - weights - grads - states - temporaries, temporaries, total)
    return FitReport(est, GPU_USABLE_BYTES[gpu], gpu, parts)


def _short(reason: str) -> str:
    """A step's label for a bar: its text up to the first parenthesis or colon."""
    return reason.split(" (")[0].split(":")[0]


# Each ledger line keeps one colour in every plan's figure (chapter 09's "optimizer states" were chapter 10's
# "gradients" colour when colours followed the order the lines appeared in); a line not listed takes one of the rest.
FIGURE_LINES = ("weights", "gradients", "optimizer states", "saved activations", "logits (FP32, loss forward)",
                "logits gradient (FP32)", "optimizer step temporaries", "recomputed block", "autocast weight cache",
                "LoRA intermediates", "dequantized matrix (NF4)", "gathered blocks (ZeRO-3)", "offload staging buffer",
                "gradient norm and overflow check", "FP32 master weights", "FP32 gradient buffer", "log-probabilities")


def figure_bars(p: Plan) -> dict[str, Any]:
    """What `utils.lessons.plan_runs.plan_figure` draws, as numbers (the course website's planner page draws the same):
    - steps: (label, {line: GiB}) per step of the plan, the label the step's text up to its first parenthesis;
    - lines: the ledger lines that hold bytes in some step, in the order they first appear (one segment each);
    - colours: each line's index in matplotlib's tab20 palette, the same in every plan (`FIGURE_LINES`);
    - budget_gib, and panels: ("full", limit) when the first bars are many times the budget, then ("zoom", 2.5 x
      the budget)."""
    check_instance("p", p, Plan)
    steps = p.history_parts or [("plan", p.parts)]
    lines = list(dict.fromkeys(k for _, parts in steps for k in parts if parts[k] > 0))
    extra = [k for k in lines if k not in FIGURE_LINES]
    colours = {k: FIGURE_LINES.index(k) if k in FIGURE_LINES else len(FIGURE_LINES) + extra.index(k) % 4
               for k in lines}
    budget = p.budget / GIB
    zoom = 2.5 * budget
    largest = max(sum(parts.values()) for _, parts in steps) / GIB
    panels = [("full", 1.05 * largest), ("zoom", zoom)] if largest > zoom else [("zoom", zoom)]
    return {"steps": [(_short(reason), {k: parts.get(k, 0) / GIB for k in lines}) for reason, parts in steps],
            "lines": lines, "colours": colours, "budget_gib": budget, "panels": panels}
