"""The capstone's planner: fit a transformer's training into a memory budget, step by step, with reasons.

Per GPU, for a `TransformerShape` (see utils.estimate) at a micro-batch and sequence length:
- parameters: FP32 master weights with mixed precision, BF16 weights in pure BF16; with LoRA the base model is
  frozen in BF16 and only the adapters (rank r on the q, k, v and output projections: 8·r·d per layer) train;
- gradients and optimizer states (Adam: two moments) for trainable parameters only;
- activations: `transformer_activation_bytes` (exact for utils.models.GPT on CPU semantics); LoRA adds its
  adapters' small inputs, which are not modelled;
- sharding over N GPUs divides optimizer states (ZeRO-1), also gradients (ZeRO-2), also parameters (ZeRO-3/FSDP);
- optimizer offloading moves Adam's states to host memory (0 bytes on the GPU).

`plan()` tries the techniques in order of cost: BF16 mixed precision, checkpointing, accumulation (smaller
micro-batches at the same effective batch), sharding, optimizer offloading, LoRA; and stops at the first that
fits, explaining each step with its breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from utils.estimate import TransformerShape, transformer_activation_bytes

SHARDING = ("none", "zero1", "zero2", "zero3")


@dataclass(frozen=True)
class Choice:
    """One training configuration."""

    precision: str = "fp32"  # "fp32", "bf16-mixed" or "bf16"
    checkpointing: bool = False
    micro_batch: int = 1
    accumulation: int = 1
    lora_rank: int = 0  # 0: full fine-tuning
    sharding: str = "none"
    n_gpus: int = 1
    offload_optimizer: bool = False

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16-mixed", "bf16"):
            raise ValueError(f"precision must be 'fp32', 'bf16-mixed' or 'bf16', got {self.precision!r}")
        if self.sharding not in SHARDING:
            raise ValueError(f"sharding must be one of {SHARDING}, got {self.sharding!r}")
        for name in ("micro_batch", "accumulation", "n_gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ValueError(f"lora_rank must be a non-negative int, got {self.lora_rank!r}")
        if self.sharding != "none" and self.n_gpus < 2:
            raise ValueError("sharding needs n_gpus >= 2")

    def describe(self) -> str:
        parts = [self.precision, f"micro-batch {self.micro_batch} x {self.accumulation} accumulation"]
        parts += ["checkpointing"] if self.checkpointing else []
        parts += [f"LoRA r={self.lora_rank}"] if self.lora_rank else []
        parts += [f"{self.sharding.upper()} over {self.n_gpus} GPUs"] if self.sharding != "none" else []
        parts += ["optimizer offloaded to CPU"] if self.offload_optimizer else []
        return ", ".join(parts)


def lora_parameters(shape: TransformerShape, rank: int) -> int:
    """Trainable parameters of rank-`rank` adapters on the q, k, v and output projections (d x d each)."""
    return shape.n_layer * 4 * rank * (shape.d_model + shape.d_model)


def memory_of(shape: TransformerShape, choice: Choice) -> dict[str, int]:
    """Bytes per GPU of each part of one training step under `choice`."""
    if not isinstance(shape, TransformerShape):
        raise TypeError(f"shape must be a TransformerShape, got {type(shape).__name__}")
    if not isinstance(choice, Choice):
        raise TypeError(f"choice must be a Choice, got {type(choice).__name__}")
    n = shape.n_params
    if choice.lora_rank:
        trainable = lora_parameters(shape, choice.lora_rank)
        weights = 2 * n + 4 * trainable  # frozen BF16 base, FP32 adapters
        grads, states = 4 * trainable, 8 * trainable
    else:
        size = 2 if choice.precision == "bf16" else 4
        weights, grads, states = size * n, size * n, 2 * size * n
    shards = choice.n_gpus
    if choice.sharding in ("zero1", "zero2", "zero3"):
        states //= shards
    if choice.sharding in ("zero2", "zero3"):
        grads //= shards
    if choice.sharding == "zero3":
        weights //= shards
    if choice.offload_optimizer:
        states = 0
    precision = "bf16-mixed" if choice.lora_rank and choice.precision == "fp32" else choice.precision
    acts = transformer_activation_bytes(shape, choice.micro_batch, precision=precision,
                                        checkpointing=choice.checkpointing)
    return {"parameters": weights, "gradients": grads, "optimizer states": states, "activations": acts}


@dataclass
class Plan:
    choice: Choice
    parts: dict[str, int]
    budget: int
    steps: list[str] = field(default_factory=list)
    history: list[tuple[str, int]] = field(default_factory=list)  # (step, total bytes per GPU), in order

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


def _largest_micro_batch(shape: TransformerShape, choice: Choice, budget: int, effective: int) -> Choice:
    """The largest power-of-two micro-batch dividing the effective batch that fits (or 1)."""
    micro = 1
    while micro * 2 <= effective and effective % (micro * 2) == 0:
        trial = replace(choice, micro_batch=micro * 2, accumulation=effective // (micro * 2))
        if sum(memory_of(shape, trial).values()) > budget:
            break
        micro *= 2
    return replace(choice, micro_batch=micro, accumulation=effective // micro)


def plan(shape: TransformerShape, budget_bytes: int, effective_batch: int, *, n_gpus: int = 1,
         allow_lora: bool = True, lora_rank: int = 16) -> Plan:
    """The least intrusive configuration that fits `budget_bytes` per GPU, with the reasoning of each step."""
    if not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive int, got {budget_bytes!r}")
    if not isinstance(effective_batch, int) or effective_batch < 1:
        raise ValueError(f"effective_batch must be a positive int, got {effective_batch!r}")
    if not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus must be a positive int, got {n_gpus!r}")
    gib = 2**30
    choice = Choice(micro_batch=effective_batch, n_gpus=n_gpus)
    steps: list[str] = []
    history: list[tuple[str, int]] = []

    def note(reason: str, c: Choice) -> Plan:
        parts = memory_of(shape, c)
        p = Plan(c, parts, budget_bytes, steps, history)
        history.append((reason, p.total))
        detail = ", ".join(f"{k} {v / gib:.1f}" for k, v in parts.items())
        steps.append(f"{reason}: {p.total / gib:.1f} GiB per GPU ({detail}) -> "
                     f"{'fits' if p.fits else 'does not fit'} in {budget_bytes / gib:.1f} GiB")
        return p

    candidates = [("full fine-tuning in FP32, whole batch at once", choice)]
    choice = replace(choice, precision="bf16-mixed")
    candidates.append(("BF16 mixed precision", choice))
    choice = replace(choice, checkpointing=True)
    candidates.append(("+ activation checkpointing", choice))
    for reason, c in candidates:
        current = note(reason, c)
        if current.fits:
            return current
    def widest(c: Choice, p: Plan) -> Plan:
        """Once a configuration fits, take the largest micro-batch that still does (fewer accumulation steps)."""
        best = _largest_micro_batch(shape, replace(c, micro_batch=1), budget_bytes, effective_batch)
        if best.micro_batch == c.micro_batch:
            return p
        return note(f"the largest micro-batch that fits: {best.micro_batch} x {best.accumulation} accumulation", best)

    choice = _largest_micro_batch(shape, replace(choice, micro_batch=1), budget_bytes, effective_batch)
    current = note(f"+ gradient accumulation ({choice.accumulation} micro-batches of {choice.micro_batch})", choice)
    if current.fits:
        return current
    if n_gpus > 1:
        for stage in ("zero1", "zero2", "zero3"):
            choice = replace(choice, sharding=stage)
            current = note(f"+ {stage.upper()} sharding over {n_gpus} GPUs", choice)
            if current.fits:
                return widest(choice, current)
    choice = replace(choice, offload_optimizer=True)
    current = note("+ optimizer states offloaded to CPU memory", choice)
    if current.fits:
        return widest(choice, current)
    if allow_lora:
        choice = replace(choice, lora_rank=lora_rank, offload_optimizer=False, sharding="none" if n_gpus == 1 else
                         choice.sharding)
        current = note(f"LoRA rank {lora_rank} on the attention projections instead of full fine-tuning "
                       f"({lora_parameters(shape, lora_rank) / 1e6:.1f}M trainable)", choice)
        if current.fits:
            return widest(choice, current)
    steps.append("nothing tried fits: a smaller model, a shorter sequence, more GPUs or a larger GPU are left")
    return current


def run_choice(cfg: Any, choice: Choice, steps: int = 10, seed: int = 0) -> tuple[int, list[float]]:
    """Train `utils.models.GPT(cfg)` for `steps` optimizer steps as `choice` says (precision, checkpointing,
    micro-batches and accumulation, LoRA through peft), and measure the peak of one micro-batch's step:
    `max_memory_allocated` on a GPU, MemTracker on a CPU (which cannot follow k forwards of one module per
    step, and needs not: accumulation only keeps the gradients, which that step already holds).
    Returns (peak bytes, the loss of each optimizer step). Sharding and offloading need several processes or
    a host copy and are not run here (ValueError)."""
    import torch

    from utils.measure import step_peak
    from utils.models import GPT, GPTConfig, gpt_batch

    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg must be a utils.models.GPTConfig, got {type(cfg).__name__}")
    if not isinstance(choice, Choice):
        raise TypeError(f"choice must be a Choice, got {type(choice).__name__}")
    if choice.sharding != "none" or choice.offload_optimizer:
        raise ValueError("run_choice runs one process on one device: no sharding or optimizer offloading")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    model = GPT(replace(cfg, checkpointing=choice.checkpointing)).to(device)
    if choice.lora_rank:
        from peft import LoraConfig, inject_adapter_in_model

        model = model.to(torch.bfloat16)  # the frozen base in BF16, as memory_of assumes
        model = inject_adapter_in_model(LoraConfig(r=choice.lora_rank, lora_alpha=2 * choice.lora_rank,
                                                   target_modules=["qkv", "proj"]), model)
        for name, p in model.named_parameters():
            p.requires_grad = "lora_" in name
            if p.requires_grad:
                p.data = p.data.float()  # FP32 adapters
    elif choice.precision == "bf16":
        model = model.to(torch.bfloat16)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=3e-3)
    autocast_dtype = torch.bfloat16 if (choice.precision == "bf16-mixed" or choice.lora_rank) else None
    x, y = gpt_batch(cfg, choice.micro_batch * choice.accumulation, device=device, seed=seed)

    def micro_step(xs: torch.Tensor, ys: torch.Tensor) -> float:
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            loss = model(xs, ys)
        (loss / choice.accumulation).backward()
        return loss.item()

    def one_micro_batch_step() -> None:
        micro_step(x[: choice.micro_batch], y[: choice.micro_batch])
        opt.step()
        opt.zero_grad(set_to_none=True)

    peak = step_peak(one_micro_batch_step, model, opt)
    losses = []
    for _ in range(steps):
        parts = [micro_step(xs, ys) for xs, ys in zip(x.chunk(choice.accumulation), y.chunk(choice.accumulation),
                                                       strict=True)]
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(sum(parts) / len(parts))
    return peak, losses
