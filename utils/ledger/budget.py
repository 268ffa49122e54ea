"""One GPU budget for the whole course: what a GPU reports, and the bytes a plan may fill on it.

`utils.ledger.plan.will_it_fit` (chapter 01) and `utils.ledger.plan.plan` (chapter 09) both read their capacity from
here, so the same setup on the same GPU gets the same budget in both chapters.
"""

from __future__ import annotations

from utils.validate import check_choice, check_int, check_number

GIB = 2**30
MIB = 2**20

# What torch reports as total memory (torch.cuda.get_device_properties(i).total_memory) for the GPUs workshops
# rent, in GiB. A card's "GB" is its product label (docs/glossary.md, "A GPU's memory"); these reported figures are
# what the course plans with. On a GPU the notebook reads the real figure instead. Sources, torch's out-of-memory
# messages ("GPU 0 has a total capacity of ..."), which print total_memory in GiB:
# T4 14.74 GiB on Colab (github.com/zai-org/CogVideo/issues/741, github.com/zyddnys/manga-image-translator/issues/1089);
# H100 80GB 79.11 GiB (github.com/vllm-project/vllm/issues/27508; the course's own H100 run measured 79.18 GiB,
# results/nvidia-h100-80gb-hbm3/01_where_the_memory_goes.json); A100 80GB 79.15-79.25 GiB (79.25 in
# github.com/levihsu/OOTDiffusion/issues/235; PCIe and SXM boards differ slightly); RTX 4090 23.68 GiB
# (github.com/zai-org/CogVideo/issues/36). The A10G, L4 and A100 40GB figures are typical values, not read from a
# log here (the L4 and the A10G are both 24 GB GDDR6 cards).
# The 48 GB cards and the H200 as torch's out-of-memory messages print them ("GPU 0 has a total capacity of ..."):
# RTX A6000 47.54 GiB (ECC off by default); L40S 44.42 GiB (github.com/stepfun-ai/Step-Video-T2V/issues/8, 8 x L40S);
# H200 139.80 GiB (the course's lent H200 machines report about 139 GiB too); the A40, a 48 GB GDDR6 card with ECC on
# like the L40S, is given the L40S's figure (approximate: no log of its own was read).
REPORTED_GIB: dict[str, float] = {"T4 (16 GB)": 14.7, "A10G (24 GB)": 22.5, "L4 (24 GB)": 22.0,
                                  "RTX 4090 (24 GB)": 23.6, "A100 (40 GB)": 39.4, "L40S (48 GB)": 44.4,
                                  "A40 (48 GB)": 44.4, "RTX A6000 (48 GB)": 47.5, "A100 (80 GB)": 79.1,
                                  "H100 (80 GB)": 79.1, "H200 (141 GB)": 139.8}
# Their compute capability (NVIDIA's table, developer.nvidia.com/cuda-gpus): it decides SDPA's kernel for BF16 attention
# (below 8.0 the math kernel, which keeps the probabilities: the capability field of utils.ledger.plan.Choice).
CAPABILITY: dict[str, tuple[int, int]] = {"T4 (16 GB)": (7, 5), "A10G (24 GB)": (8, 6), "L4 (24 GB)": (8, 9),
                                          "RTX 4090 (24 GB)": (8, 9), "A100 (40 GB)": (8, 0), "L40S (48 GB)": (8, 9),
                                          "A40 (48 GB)": (8, 6), "RTX A6000 (48 GB)": (8, 6), "A100 (80 GB)": (8, 0),
                                          "H100 (80 GB)": (9, 0), "H200 (141 GB)": (9, 0)}
# Short names (chapter 01's) for the same GPUs.
GPU_ALIASES: dict[str, str] = {"T4": "T4 (16 GB)", "A10G": "A10G (24 GB)", "L4": "L4 (24 GB)",
                               "RTX 4090": "RTX 4090 (24 GB)", "A100 40GB": "A100 (40 GB)",
                               "A100 80GB": "A100 (80 GB)", "H100": "H100 (80 GB)", "L40S": "L40S (48 GB)",
                               "A40": "A40 (48 GB)", "RTX A6000": "RTX A6000 (48 GB)", "H200": "H200 (141 GB)"}
# Headroom: the CUDA context (driver, kernels' code) takes 300-600 MiB of the reported memory and is invisible to
# max_memory_allocated; cuBLAS keeps a workspace per handle and stream (up to 2 x 32 MiB on an H100); the caching
# allocator loses some of what it reserves to fragmentation (chapter 07 measures 5-15% on uneven workloads).
CUDA_CONTEXT_BYTES = 512 * MIB
WORKSPACE_BYTES = 64 * MIB
FRAGMENTATION = 0.10


def usable_budget(reported_bytes: int, context_bytes: int = CUDA_CONTEXT_BYTES,
                  workspace_bytes: int = WORKSPACE_BYTES, fragmentation: float = FRAGMENTATION) -> int:
    """Bytes a plan may fill on a GPU that reports `reported_bytes`: minus the CUDA context and the cuBLAS
    workspaces, then minus a fraction lost to the allocator's fragmentation."""
    check_int("reported_bytes", reported_bytes, minimum=1)
    check_int("context_bytes", context_bytes, minimum=0)
    check_int("workspace_bytes", workspace_bytes, minimum=0)
    check_number("fragmentation", fragmentation, minimum=0.0, maximum=0.9)
    return _usable_budget(reported_bytes, context_bytes, workspace_bytes, fragmentation)


def _usable_budget(reported_bytes: int, context_bytes: int = CUDA_CONTEXT_BYTES,
                  workspace_bytes: int = WORKSPACE_BYTES, fragmentation: float = FRAGMENTATION) -> int:
    return max(0, int((reported_bytes - context_bytes - workspace_bytes) * (1 - fragmentation)))


def reported_bytes(gpu: str) -> int:
    """The total memory torch reports for `gpu` (a REPORTED_GIB name or a GPU_ALIASES short name), in bytes."""
    check_choice("gpu", gpu, (*REPORTED_GIB, *GPU_ALIASES))
    return int(REPORTED_GIB[GPU_ALIASES.get(gpu, gpu)] * GIB)


def gpu_budget(gpu: str) -> int:
    """The usable budget of a named GPU: `usable_budget(reported_bytes(gpu))`."""
    return _usable_budget(reported_bytes(gpu))
