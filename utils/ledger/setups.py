"""The model-state setups people run, in bytes per parameter per GPU (weights, gradients, optimizer states),
sharded over `n_gpus` data-parallel ranks where the setup shards.

- Megatron-LM (https://github.com/NVIDIA/Megatron-LM, README "Distributed optimizer"): FP16 params + FP16 grads
  20 B/param (4 + 16/d with the distributed optimizer), BF16 params + FP32 grads 18 (6 + 12/d), FP32 params + FP32
  grads 16 (8 + 8/d): the distributed optimizer shards the FP32 master weights, Adam's moments and (for FP16
  grads) the FP32 main gradients, not the model's own weights and gradients.
- DeepSpeed ZeRO-2 with BF16: BF16 weights on every rank (2), FP32 gradients, master weights and Adam sharded
  (16/N): 2 + 16/N.
- BF16 weights with FP32 Adam states and BF16 gradients: 12 B/param (QLoRA's full fine-tuning baseline, Dettmers
  et al., arXiv:2305.14314).
- A frozen FP32 base (4 B/param, nothing else) under LoRA; BF16 adapters with FP32 Adam: 2 + 2 + 8 per adapter
  parameter.
- Paged optimizer states (bitsandbytes' paged AdamW): the states live in CUDA unified memory and page out to the
  host under pressure: their GPU bytes at the peak are at most the states, at least 0 (`paged=True` counts them
  on the host).
- The planner's own regimes (`utils.ledger.plan`, chapter 09) read their bytes from here too: torch.amp's FP32 weights,
  gradients and Adam (16), pure BF16 with AdamW's moments in BF16 (8), FP32 LoRA adapters, and ZeRO-Offload (BF16
  weights on the GPU; FP32 gradient buffer, master weights and Adam on the host).
- Activation offload (`torch.autograd.graph.save_on_cpu`): saved activations go to pinned host memory; the GPU
  keeps what one layer is computing (`activation_offload_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from utils.validate import check_bool, check_choice, check_int

LINES = ("weights", "gradients", "master", "moments")  # master: FP32 master weights and main gradients


@dataclass(frozen=True)
class Setup:
    """Bytes per parameter of each model-state line: the weights the model computes with, their gradients, what the
    optimizer owns besides its moments (FP32 master weights, FP32 main gradients) and Adam's two moments; `sharded`
    names the lines its distributed form divides by the ranks; `on_host` the lines an offloading setup keeps in
    host RAM (not on the GPU)."""

    weights: float
    gradients: float
    master: float
    moments: float
    what: str
    sharded: tuple[str, ...] = ()
    on_host: tuple[str, ...] = ()

    @property
    def replicated(self) -> float:
        return sum(getattr(self, k) for k in LINES if k not in self.sharded and k not in self.on_host)

    @property
    def shardable(self) -> float:
        return sum(getattr(self, k) for k in self.sharded if k not in self.on_host)


_OPTIMIZER = ("master", "moments")
SETUPS: dict[str, Setup] = {
    "megatron fp16 params + fp16 grads": Setup(2, 2, 8, 8, "FP16 weights 2, FP16 grads 2 | FP32 main grads 4, "
                                                           "FP32 master 4, Adam 8", _OPTIMIZER),
    "megatron bf16 params + fp32 grads": Setup(2, 4, 4, 8, "BF16 weights 2, FP32 main grads 4 | FP32 master 4, "
                                                           "Adam 8", _OPTIMIZER),
    "megatron fp32 params + fp32 grads": Setup(4, 4, 0, 8, "FP32 weights 4, FP32 grads 4 | Adam 8", _OPTIMIZER),
    "deepspeed zero-2 bf16": Setup(2, 4, 4, 8, "BF16 weights 2 | FP32 grads 4, FP32 master 4, Adam 8",
                                   ("gradients", *_OPTIMIZER)),
    "bf16 weights + fp32 adam": Setup(2, 2, 0, 8, "BF16 weights 2, BF16 grads 2, FP32 Adam 8"),
    "frozen fp32 base": Setup(4, 0, 0, 0, "FP32 weights 4 (frozen: no gradient, no state)"),
    "frozen bf16 base": Setup(2, 0, 0, 0, "BF16 weights 2 (frozen)"),
    "bf16 adapters + fp32 adam": Setup(2, 2, 0, 8, "BF16 adapter weights 2, BF16 grads 2, FP32 Adam 8"),
    # what utils.ledger.plan's regimes keep (chapter 09); the ZeRO stages shard them as the planner's `sharding` says
    "torch.amp (fp32 weights, adamw)": Setup(4, 4, 0, 8, "FP32 weights 4, FP32 grads 4, FP32 Adam 8 (autocast "
                                                         "computes in BF16; the same bytes in FP32 training)"),
    "pure bf16 (adamw in bf16)": Setup(2, 2, 0, 4, "BF16 weights 2, BF16 grads 2, AdamW's moments in BF16 4"),
    "fp32 adapters + adamw": Setup(4, 4, 0, 8, "FP32 adapter weights 4, FP32 grads 4, FP32 Adam 8"),
    "zero-offload (bf16 on the gpu)": Setup(2, 4, 4, 8, "BF16 weights 2 on the GPU | FP32 gradient buffer 4, FP32 "
                                                        "master 4, Adam 8 on the host", ("gradients", *_OPTIMIZER),
                                            ("gradients", "master", "moments")),
}


def setup_lines(setup: str) -> dict[str, float]:
    """A named setup's bytes per parameter, line by line (weights, gradients, master, moments)."""
    check_choice("setup", setup, tuple(SETUPS))
    return _setup_lines(setup)


def _setup_lines(setup: str) -> dict[str, float]:
    return {k: float(getattr(SETUPS[setup], k)) for k in LINES}


def model_state_bytes(n_params: int, setup: str, *, n_gpus: int = 1, sharded: bool = False,
                      paged: bool = False) -> float:
    """Model-state bytes per GPU of `n_params` parameters under a named setup (SETUPS); `sharded` divides the
    shardable part by `n_gpus` (Megatron's distributed optimizer, ZeRO); `paged` leaves Adam's moments to paged
    memory, off the GPU at the peak; lines an offloading setup keeps on the host are not counted."""
    check_int("n_params", n_params, minimum=1)
    check_choice("setup", setup, tuple(SETUPS))
    check_int("n_gpus", n_gpus, minimum=1)
    check_bool("sharded", sharded)
    check_bool("paged", paged)
    s = SETUPS[setup]
    replicated, shardable = s.replicated, s.shardable
    if paged:
        if not s.moments:
            raise ValueError(f"paged=True needs an Adam setup; {setup!r} keeps no optimizer states")
        if "moments" in s.sharded:
            shardable -= s.moments
        else:
            replicated -= s.moments
    return n_params * (replicated + (shardable / n_gpus if sharded else shardable))


def activation_offload_bytes(per_layer_bytes: int, n_layer: int, *, offload: bool) -> dict[str, int]:
    """GPU and host bytes of saved activations: without offload all layers' on the GPU; with
    `save_on_cpu` all on the host, and on the GPU the layer being computed (its saved tensors before they move)."""
    check_int("per_layer_bytes", per_layer_bytes, minimum=0)
    check_int("n_layer", n_layer, minimum=1)
    check_bool("offload", offload)
    total = per_layer_bytes * n_layer
    return {"gpu": per_layer_bytes, "host": total} if offload else {"gpu": total, "host": 0}
