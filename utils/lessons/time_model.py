"""How long each chapter's full-size work takes on each tier's GPU: a prediction from FLOPs at sustained rates,
per-op host overhead and per-chapter fixed costs.

Each chapter lists its full-size GPU work in `utils/lessons/experiment_sizes/chNN.py` as `work(tier) -> list[Work]`: the
training steps, timed matmuls and forward/backward passes its cells run, each as the FLOPs of one repetition (counted
by `torch.utils.flop_counter.FlopCounterMode` on the meta device: no memory, no compute), the aten ops one repetition
dispatches (counted the same way), how many times the notebook runs it, and the precision its matmuls run in.

A piece of work takes max(device time, host time), at least its benchmark's minimum time:
- device time = FLOPs / (SIZE_EFFICIENCY x the GPU's SUSTAINED rate for that precision) x (1 + NON_GEMM_SHARE).
  SUSTAINED is what a large eager GEMM reaches (T4: clocked down by its 70 W; A10G: its datasheet FP32 counts
  dual-issue FP32 that SGEMM does not reach), not the datasheet peak; BF16 and TF32 below compute capability 8.0 run
  at the FP32 rate (no BF16 Tensor Cores), FP8 without FP8 Tensor Cores at the BF16 (else FP32) rate (chapter 08
  emulates it). SIZE_EFFICIENCY: the course's matmuls are mid-sized (GPT-2 small at batch 4-8). NON_GEMM_SHARE:
  elementwise ops, norms, softmax and the optimizer (memory-bound) on top of the matmuls.
- host time = repetitions x aten ops x HOST_S_PER_OP: Python, the dispatcher and the kernel launch of each op, which
  the GPU cannot hide when its kernels are shorter (tiny models, the H100).
A chapter adds FIXED_COSTS: the kernel's start and imports, CUDA's initialisation, and the chapter's own (chapter
05's three torch.compile graphs, chapter 06's gloo workers, chapter 07's fragmentation children, chapter 08's
Transformer Engine import).

What each number is: a prediction, not a bound. The rates are assumptions (typical sustained GEMM throughput, not
measured here: there is no GPU); the host overhead and the fixed costs were measured on the course's 2-core CI machine
(utils.lessons.time_model._measure_host_costs; under load, so on the slow side) and are applied unscaled to a GPU host's
CPU. `datasheet_bound_seconds` is what remains a bound: the matmul FLOPs at the datasheet peak, which no run beats (the
model before issue 33 took 40% of that peak as its prediction: neither a bound nor a prediction). `make gpu-check`
prints the prediction next to the measured wall time. tests/test_time_model.py holds every chapter to 5 minutes on a T4
and the course to 40.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache

import torch
from torch.utils.flop_counter import FlopCounterMode

from utils.lessons.sizes import TIERS
from utils.validate import check_bool, check_choice, check_int, check_number

EFFICIENCY = 0.40  # the model before issue 33 predicted matmul FLOPs at this fraction of the datasheet peak
SIZE_EFFICIENCY = 0.70  # the course's mid-size matmuls against a large GEMM's sustained rate
NON_GEMM_SHARE = 0.25  # elementwise, norm, softmax and optimizer time on top of the matmuls (eager training step)
# Host seconds per aten op: measured on the CI machine (2 shared cores) by _measure_host_costs(): 5.1-6.1 us for a
# Python-issued op (x = x + 1 on a 1-element tensor); a CUDA launch adds 2-4 us, ops that autograd's engine issues
# from C++ skip Python: 6 us covers both. Not scaled to a GPU host's CPU (typically no slower than this one).
HOST_S_PER_OP = 6e-6
CUDA_INIT_S = 2.0  # creating the CUDA context and loading the kernels' modules (not measurable without a GPU)
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
CHAPTER_LIMIT_S = 300.0  # a chapter's full size on a T4
COURSE_LIMIT_S = 2400.0  # every chapter's full size on a T4
CHAPTERS = tuple(f"{n:02d}" for n in range(11))


@dataclass(frozen=True)
class GpuRates:
    """A GPU's dense peak rates in TFLOP/s (datasheet), what a large eager GEMM sustains (assumed), its compute
    capability and its memory tier."""

    name: str
    capability: tuple[int, int]
    tier: int
    fp32: float
    tf32: float | None
    fp16: float
    bf16: float | None
    fp8: float | None
    source: str
    sustained: dict[str, float] = field(default_factory=dict)  # precision -> TFLOP/s (native formats only)

    def rate(self, precision: str) -> float:
        """Datasheet TFLOP/s for matmuls in `precision` (emulated formats at the FP32 rate): the old model's."""
        check_choice("precision", precision, PRECISIONS)
        if precision == "fp32":
            return self.fp32
        if precision == "fp16":
            return self.fp16
        native = {"tf32": self.tf32, "bf16": self.bf16, "fp8": self.fp8}[precision]
        # below 8.0 BF16 and TF32 are emulated; FP8 without FP8 Tensor Cores is emulated (chapter 08) in FP32
        return self.fp32 if native is None else native

    def sustained_rate(self, precision: str) -> float:
        """TFLOP/s a large eager GEMM sustains in `precision`: TF32 and BF16 without Tensor Cores for them at the
        FP32 rate, FP8 without FP8 Tensor Cores at the BF16 rate (else FP32): chapter 08 emulates it."""
        check_choice("precision", precision, PRECISIONS)
        got = self.sustained.get(precision)
        if got is not None:
            return got
        if precision == "fp8" and "bf16" in self.sustained:
            return self.sustained["bf16"]
        return self.sustained["fp32"]


_A100 = dict(capability=(8, 0), fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0, fp8=None,
             sustained={"fp32": 18.0, "tf32": 120.0, "fp16": 220.0, "bf16": 220.0})
# Dense (no sparsity) Tensor Core peaks from NVIDIA's datasheets; sustained rates: typical large-GEMM throughput in
# eager PyTorch (assumed; gpu-check's wall times check them).
GPUS: dict[str, GpuRates] = {
    "T4": GpuRates("T4", (7, 5), 16, fp32=8.1, tf32=None, fp16=65.0, bf16=None, fp8=None,
                   source="NVIDIA T4 datasheet: 65 TFLOP/s FP16 Tensor Core (mixed precision), 8.1 FP32",
                   sustained={"fp32": 4.5, "fp16": 30.0}),
    "A10G": GpuRates("A10G", (8, 6), 24, fp32=31.2, tf32=62.5, fp16=125.0, bf16=125.0, fp8=None,
                     source="NVIDIA A10 datasheet (A10G is AWS's variant of the same GA102 part)",
                     sustained={"fp32": 15.0, "tf32": 30.0, "fp16": 60.0, "bf16": 60.0}),
    "A100": GpuRates("A100", tier=40, source="NVIDIA A100 datasheet (dense), 40 GB", **_A100),
    "A100-80GB": GpuRates("A100-80GB", tier=80, source="NVIDIA A100 datasheet (dense), 80 GB: the same rates",
                          **_A100),
    "H100": GpuRates("H100", (9, 0), 80, fp32=67.0, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9,
                     source="NVIDIA H100 SXM datasheet (dense)",
                     sustained={"fp32": 48.0, "tf32": 350.0, "fp16": 600.0, "bf16": 600.0, "fp8": 1000.0}),
}
# The reference GPU of each tier in time_table (the A100-80GB shares the H100's tier; it is matched by gpu-check).
TABLE_GPUS = ("T4", "A10G", "A100", "H100")

# Fixed seconds per chapter, by what they are. "start": a fresh kernel importing the chapter's modules (measured on
# the CI machine: 5.4 s for torch, matplotlib and utils under load) + CUDA_INIT_S. Chapter 05 compiles three graphs
# with torch.compile (7.2 s for an 8-block stack measured here; the chapter's stacks are deeper: 2x); chapter 06
# starts two 2-rank gloo jobs (3.4 s each measured here); chapter 07 starts its fragmentation child once per
# allocator setting (4 settings: a Python with torch, 5.7 s measured here under load, + CUDA_INIT_S); chapter 08
# imports Transformer Engine and torchao (about 10 s: not installed here, an assumption).
_START_S = 5.4 + CUDA_INIT_S
FIXED_COSTS: dict[str, dict[str, float]] = {
    "00": {"start": _START_S, "nvidia-smi queries and package versions": 2.0},
    "01": {"start": _START_S},
    "02": {"start": _START_S},
    "03": {"start": _START_S},
    "04": {"start": _START_S},
    "05": {"start": _START_S, "torch.compile, three graphs": 3 * 2 * 7.2},
    "06": {"start": _START_S, "two 2-rank gloo jobs": 2 * 3.4},
    "07": {"start": _START_S, "fragmentation children (4 settings)": 4 * (5.7 + CUDA_INIT_S)},
    "08": {"start": _START_S, "Transformer Engine and torchao imports": 10.0},
    "09": {"start": _START_S},
    "10": {"start": _START_S, "one 2-rank gloo job (FSDP2)": 3.4},
}


@dataclass(frozen=True)
class Work:
    """One piece of a chapter's full-size work: FLOPs of one repetition, repetitions, matmul precision, and for a
    time-based benchmark (torch.utils.benchmark's blocked_autorange) the least time it runs."""

    name: str
    flops: int
    repeats: int
    precision: str
    min_seconds: float = 0.0
    ops: int = 0  # aten ops one repetition dispatches (host overhead); 0: the matmuls only (one op each)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        check_int("flops", self.flops, minimum=0)
        check_int("repeats", self.repeats, minimum=0)
        check_choice("precision", self.precision, PRECISIONS)
        check_number("min_seconds", self.min_seconds, minimum=0)
        check_int("ops", self.ops, minimum=0)

    @property
    def total_flops(self) -> int:
        return self.flops * self.repeats


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of `fn()` as torch.utils.flop_counter counts them (matmuls, convolutions, attention); build tensors
    and modules on the meta device inside `fn` to count a full-size step without memory or compute."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def count_ops(fn: Callable[[], object]) -> int:
    """aten ops `fn()` dispatches (every op past autograd, views included), counted like count_flops: build tensors
    and modules on the meta device inside `fn`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn()
    return _Count.n


def gpt_step_ops(cfg: object, *, backward: bool = True, optimizer: bool = True) -> int:
    """aten ops of one utils.lessons.models.GPT forward (and backward, and AdamW's foreach step): independent of the
    batch."""
    from utils.lessons.models import GPTConfig

    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
    check_bool("backward", backward)
    check_bool("optimizer", optimizer)
    return _gpt_step_ops(cfg, backward, optimizer)


@lru_cache(maxsize=64)
def _gpt_step_ops(cfg: object, backward: bool, optimizer: bool) -> int:
    from utils.lessons.models import GPT

    with torch.device("meta"):
        model = GPT(cfg)
        idx = torch.zeros(1, cfg.seq_len, dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)

    def step() -> None:
        loss = model(idx, idx)
        if backward:
            loss.backward()
            if optimizer:
                opt.step()

    return count_ops(step)


def linear_stack_ops(n_layers: int, *, backward: bool = True) -> int:
    """aten ops of a stack of `n_layers` Linear layers: about 3 forward (view, addmm, view) and 6 backward each."""
    check_int("n_layers", n_layers, minimum=1)
    check_bool("backward", backward)
    return n_layers * (9 if backward else 3)


def gpt_step_flops(cfg: object, batch: int, *, backward: bool = True) -> int:
    """FLOPs of one utils.lessons.models.GPT forward (and backward) at `batch` sequences of cfg.seq_len tokens."""
    from utils.lessons.models import GPTConfig

    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
    check_int("batch", batch, minimum=1)
    # Every matmul of the GPT is linear in the batch and the blocks are identical, so one sequence through one
    # and two blocks gives the rest exactly (tests/test_time_model.py checks it against a direct count).
    check_bool("backward", backward)
    one, two = (_gpt_step_flops(replace(cfg, n_layer=n), 1, backward) for n in (1, 2))
    return batch * (one + (cfg.n_layer - 1) * (two - one))


@lru_cache(maxsize=256)
def _gpt_step_flops(cfg: object, batch: int, backward: bool) -> int:
    """FlopCounterMode's count of one GPT step on the meta device."""
    from utils.lessons.models import GPT

    def step() -> None:
        with torch.device("meta"):
            model = GPT(cfg)
            idx = torch.zeros(batch, cfg.seq_len, dtype=torch.long)
        loss = model(idx, idx)
        if backward:
            loss.backward()

    return count_flops(step)


def linear_stack_flops(widths: list[tuple[int, int]], tokens: int, *, backward: bool = True) -> int:
    """FLOPs of a stack of Linear layers (in, out) on `tokens` rows, forward (and backward)."""
    check_int("tokens", tokens, minimum=1)
    check_bool("backward", backward)
    if not isinstance(widths, list) or not widths:
        raise TypeError("widths must be a non-empty list of (in, out) pairs")
    for i, pair in enumerate(widths):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"widths[{i}] must be an (in, out) pair, got {pair!r}")
        for value in pair:
            check_int(f"widths[{i}]", value, minimum=1)
    return _linear_stack_flops(tuple(tuple(p) for p in widths), tokens, backward)


@lru_cache(maxsize=256)
def _linear_stack_flops(widths: tuple[tuple[int, int], ...], tokens: int, backward: bool) -> int:
    def step() -> None:
        with torch.device("meta"):
            layers = torch.nn.Sequential(*(torch.nn.Linear(i, o) for i, o in widths))
            x = torch.zeros(tokens, widths[0][0], requires_grad=backward)
        out = layers(x).sum()
        if backward:
            out.backward()

    return count_flops(step)


def matmul_flops(n: int) -> int:
    """FLOPs of one n x n by n x n matmul: 2 n^3."""
    check_int("n", n, minimum=1)
    return 2 * n**3


def work_seconds(work: Work, gpu: GpuRates) -> tuple[float, float]:
    """(device seconds, host seconds) of `work` on `gpu` (see the module doc)."""
    if not isinstance(work, Work):
        raise TypeError(f"work must be a Work, got {type(work).__name__}")
    if not isinstance(gpu, GpuRates):
        raise TypeError(f"gpu must be a GpuRates, got {type(gpu).__name__}")
    device = work.total_flops / (SIZE_EFFICIENCY * gpu.sustained_rate(work.precision) * 1e12) * (1 + NON_GEMM_SHARE)
    host = work.repeats * max(work.ops, 1) * HOST_S_PER_OP
    return device, host


def predicted_seconds(works: list[Work], gpu: GpuRates, *, chapter: str | None = None) -> float:
    """Seconds the works take on `gpu`: each max(device time, host time), at least its benchmark's minimum; plus the
    chapter's FIXED_COSTS when `chapter` is given."""
    if not isinstance(gpu, GpuRates):
        raise TypeError(f"gpu must be a GpuRates, got {type(gpu).__name__}")
    if not isinstance(works, list) or not all(isinstance(w, Work) for w in works):
        raise TypeError("works must be a list of Work")
    if chapter is not None:
        check_choice("chapter", chapter, CHAPTERS)
    seconds = sum(max(w.min_seconds, *work_seconds(w, gpu)) for w in works)
    return seconds + (sum(FIXED_COSTS[chapter].values()) if chapter is not None else 0.0)


def datasheet_bound_seconds(works: list[Work], gpu: GpuRates, *, efficiency: float = 1.0) -> float:
    """The matmul FLOPs at the datasheet peak (each at least its benchmark's minimum): a lower bound of the time,
    never a prediction. `efficiency=EFFICIENCY` gives the model before issue 33 (40% of the peak)."""
    efficiency = check_number("efficiency", efficiency, positive=True, maximum=1.0)
    if not isinstance(gpu, GpuRates):
        raise TypeError(f"gpu must be a GpuRates, got {type(gpu).__name__}")
    if not isinstance(works, list) or not all(isinstance(w, Work) for w in works):
        raise TypeError("works must be a list of Work")
    return sum(max(w.min_seconds, w.total_flops / (efficiency * gpu.rate(w.precision) * 1e12)) for w in works)


def chapter_work(chapter: str, tier: int) -> list[Work]:
    """The full-size work of chapter `chapter` ("00".."10") on a GPU of memory tier `tier`."""
    check_choice("chapter", chapter, CHAPTERS)
    check_choice("tier", tier, TIERS)
    return list(_chapter_work(chapter, tier))


@cache
def _chapter_work(chapter: str, tier: int) -> tuple[Work, ...]:
    """chapter_work's list, traced once per process (a chapter's models are traced on the meta device: seconds; a
    Work is frozen, so the tuple is shared safely)."""
    import importlib

    module = importlib.import_module(f"utils.lessons.experiment_sizes.ch{chapter}")
    works = module.work(tier)
    if not isinstance(works, list) or not all(isinstance(w, Work) for w in works):
        raise TypeError(f"utils.lessons.experiment_sizes.ch{chapter}.work must return a list of Work")
    return tuple(works)


def time_table(*, bound: bool = False) -> tuple[list[tuple[str, ...]], list[str], dict[str, float]]:
    """Rows (chapter, predicted seconds on each reference GPU at its tier), headers and the totals per GPU;
    `bound=True`: the lower bound instead (datasheet_bound_seconds: matmul FLOPs at the datasheet peak)."""
    check_bool("bound", bound)
    gpus = {k: GPUS[k] for k in TABLE_GPUS}
    totals = dict.fromkeys(gpus, 0.0)
    rows = []
    for chapter in CHAPTERS:
        cells = []
        for key, gpu in gpus.items():
            works = chapter_work(chapter, gpu.tier)
            seconds = datasheet_bound_seconds(works, gpu) if bound else predicted_seconds(works, gpu,
                                                                                          chapter=chapter)
            totals[key] += seconds
            cells.append(f"{seconds:.0f}")
        rows.append((chapter, *cells))
    rows.append(("course", *(f"{totals[k]:.0f}" for k in gpus)))
    headers = ["chapter"] + [f"{g.name} (tier {g.tier}) s" for g in gpus.values()]
    return rows, headers, totals


def _measure_host_costs() -> dict[str, float]:
    """What HOST_S_PER_OP and FIXED_COSTS were measured from, on this machine: seconds for a Python child importing
    torch, microseconds per small op. (Timings: they move with the machine's load; nothing asserts on them.)"""
    import subprocess
    import sys
    import time

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    start = time.perf_counter() - t0
    x = torch.zeros(1)
    for _ in range(1000):
        x = x + 1
    t0 = time.perf_counter()
    for _ in range(10_000):
        x = x + 1
    return {"python_import_torch_s": start, "us_per_op": (time.perf_counter() - t0) / 10_000 * 1e6}
