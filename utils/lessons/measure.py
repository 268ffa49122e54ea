"""Measuring memory: saved activations, parameters, gradients, optimizer states, CUDA peaks, step peaks.

Everything here is exact on CPU and GPU alike except `cuda_peak` (CUDA's allocator) and
`step_peak_by_category` (MemTracker follows tensors, so it also works on CPU). A peak is always the peak ABOVE
what was in use when the measured region began (plus, for a training step, the state the step owns).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the tensor's own elements (numel x element size), not of the storage it may view."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    return t.numel() * t.element_size()


def _unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


def _check_module(model: Any, name: str = "model") -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")


def parameter_bytes(model: torch.nn.Module, *, trainable_only: bool = False) -> int:
    """Bytes of the model's parameters, each shared storage counted once."""
    _check_module(model)
    if not isinstance(trainable_only, bool):
        raise TypeError(f"trainable_only must be True or False, got {type(trainable_only).__name__}")
    return _unique_storage_bytes(p for p in model.parameters() if p.requires_grad or not trainable_only)


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of the `.grad` tensors that exist now (None gradients take no memory)."""
    _check_module(model)
    return _unique_storage_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's state (Adam's moments and step counters, momentum buffers).

    The state exists only after the first `optimizer.step()`; before it this returns 0.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    tensors = [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return _unique_storage_bytes(tensors)


def _module_state_storages(objects: Iterable[Any]) -> set[int]:
    """Storage keys of the parameters and buffers of every nn.Module among `objects`."""
    keys: set[int] = set()
    for obj in objects:
        module = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "__self__", None)
        if isinstance(module, torch.nn.Module):
            for t in list(module.parameters()) + list(module.buffers()):
                keys.add(t.untyped_storage()._cdata)
    return keys


@dataclass
class SavedTensorCounter:
    """Counts what autograd saves for backward while active; see `saved_activation_bytes`.

    Parameters (and the parameters and buffers of `exclude_modules`, and `exclude_tensors`) are not
    counted: they are model state, not activations. Each storage is counted once, whole, as that is what stays alive.
    """

    exclude_modules: tuple[Any, ...] = ()
    exclude_tensors: tuple[torch.Tensor, ...] = ()
    bytes: int = 0
    count: int = 0
    _seen: dict[int, StorageWeakRef] = field(default_factory=dict, repr=False)
    _excluded: set[int] = field(default_factory=set, repr=False)

    def _is_state(self, t: torch.Tensor) -> bool:
        base = t._base if t._base is not None else t
        return isinstance(base, torch.nn.Parameter) or t.untyped_storage()._cdata in self._excluded

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if not self._is_state(t):
            storage = t.untyped_storage()
            key = storage._cdata
            known = self._seen.get(key)
            if known is None or known.expired():  # a freed storage's address may be reused
                self._seen[key] = StorageWeakRef(storage)
                self.bytes += storage.nbytes()
                self.count += 1
        return t

    def reset(self) -> None:
        """Start counting from zero (a new forward pass)."""
        self.bytes, self.count = 0, 0
        self._seen.clear()

    @contextmanager
    def active(self) -> Iterator[SavedTensorCounter]:
        self._excluded = _module_state_storages(self.exclude_modules)
        self._excluded |= {t.untyped_storage()._cdata for t in self.exclude_tensors}
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self


def saved_activation_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Run `fn(*args, **kwargs)` and return the bytes autograd saved for backward, parameters excluded.

    Storages are de-duplicated (a tensor saved by two ops counts once). The parameters and buffers of
    any nn.Module passed as `fn` (or bound to it) or among the arguments are excluded too.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    counter = SavedTensorCounter(exclude_modules=(fn, *args, *kwargs.values()))
    with counter.active():
        result = fn(*args, **kwargs)
    del result  # the graph (and what it saved) may be freed now
    return counter.bytes


@dataclass
class CudaPeak:
    """Filled in when a `cuda_peak()` block ends: bytes, from the caching allocator's counters.

    `peak_allocated` and `peak_reserved` are the allocator's absolute maxima during the block: they include
    everything alive when it began (model, optimizer state, other cells' tensors, cuBLAS workspaces).
    The figures a lesson wants are the ones ABOVE the start: `peak_above_start` and
    `peak_reserved_above_start`. Neither counts the CUDA context (nvidia-smi shows it; the allocator never sees it).
    """

    device: str = ""
    allocated_before: int = 0
    reserved_before: int = 0
    requested_before: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    peak_requested: int = 0
    allocated_after: int = 0

    @property
    def peak_above_start(self) -> int:
        """How far the block pushed allocated memory above what was allocated when it began."""
        return max(0, self.peak_allocated - self.allocated_before)

    @property
    def peak_reserved_above_start(self) -> int:
        """How far the block pushed reserved memory (segments cudaMalloc'ed) above the start; the cache of
        freed blocks is emptied before the block begins, so stale cache from earlier cells is not in it."""
        return max(0, self.peak_reserved - self.reserved_before)

    @property
    def peak_requested_above_start(self) -> int:
        """The same peak in bytes the code asked for (memory_stats' requested_bytes): without the allocator's
        rounding to 512-byte multiples and the unsplit remainders of reused cached blocks."""
        return max(0, self.peak_requested - self.requested_before)


def _cuda_device(device: Any, name: str = "device") -> torch.device:
    if device is not None and not isinstance(device, int | str | torch.device) or isinstance(device, bool):
        raise TypeError(f"{name} must be an int, str, torch.device or None, got {type(device).__name__}")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"{name} must be a CUDA device, got {dev}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def warm_up_cuda(device: int | str | torch.device | None = None) -> None:
    """Create the cuBLAS handles and workspaces of `device` before a measurement, so none is counted in it.

    cuBLAS allocates its workspace through the caching allocator the first time a thread runs a matmul on a
    stream (by default 8,519,680 B = 8.125 MiB per handle below compute capability 9.0, 32 MiB from 9.0 on,
    Hopper and Blackwell: CUBLAS_WORKSPACE_CONFIG,
    aten/src/ATen/cuda/CublasHandlePool.cpp; cuBLASLt reuses that allocation by default on open-source CUDA
    builds, unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=0 gives it its own); the forward runs on this thread and the
    backward on autograd's device thread, so one small matmul forward AND backward (in FP32 and FP16, with and
    without a bias: cuBLAS and cuBLASLt) creates both. Cheap (a few tiny kernels), so it runs before every
    measurement; its tensors are freed at once, the workspaces stay (they are never freed, even by empty_cache).
    """
    if not torch.cuda.is_available():
        raise RuntimeError("warm_up_cuda needs a CUDA GPU")
    dev = _cuda_device(device)
    for dtype in (torch.float32, torch.float16):
        w = torch.randn(16, 16, device=dev, dtype=dtype, requires_grad=True)
        b = torch.zeros(16, device=dev, dtype=dtype, requires_grad=True)
        x = torch.randn(8, 16, device=dev, dtype=dtype, requires_grad=True)
        (torch.nn.functional.linear(x, w, b).sum() + (x @ w).sum()).backward()
        del w, b, x
    torch.cuda.synchronize(dev)


@contextmanager
def cuda_peak(device: int | str | torch.device | None = None, *, warm_up: bool = True) -> Iterator[CudaPeak]:
    """Measure a block's peak allocated and reserved CUDA memory, relative to its start.

    Before the block: freed cached blocks are returned to the driver (`empty_cache`), the cuBLAS handles are
    warmed up (`warm_up_cuda`, unless warm_up=False: their workspaces then get segments of their own instead of
    being best-fit into a freed block that would stay cached), the cache is emptied again (so the reserved figures
    start from live segments), and the peak counters are reset. Read `peak_above_start`, not `peak_allocated`.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_peak needs a CUDA GPU; on CPU use saved_activation_bytes or step_peak_by_category")
    dev = _cuda_device(device)
    if not isinstance(warm_up, bool):
        raise TypeError(f"warm_up must be True or False, got {type(warm_up).__name__}")
    if warm_up:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        warm_up_cuda(dev)
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    record = CudaPeak(device=torch.cuda.get_device_name(dev), allocated_before=torch.cuda.memory_allocated(dev),
                      reserved_before=torch.cuda.memory_reserved(dev),
                      requested_before=torch.cuda.memory_stats(dev).get("requested_bytes.all.current", 0))
    try:
        yield record
    finally:
        torch.cuda.synchronize(dev)
        record.peak_allocated = torch.cuda.max_memory_allocated(dev)
        record.peak_reserved = torch.cuda.max_memory_reserved(dev)
        record.peak_requested = torch.cuda.memory_stats(dev).get("requested_bytes.all.peak", 0)
        record.allocated_after = torch.cuda.memory_allocated(dev)


class _NoHook:
    def remove(self) -> None:
        pass


@functools.cache
def _tracker_class() -> type:
    """torch's MemTracker, reading its module table without a weak-reference call per module at every operator.

    At each operator MemTracker updates the peaks of the modules that are running (`_update_peak_stats`), looping
    over `memory_tracking.values()`, a WeakIdKeyDictionary whose values() calls every key's weak reference in
    Python: a quarter of a traced step's time on a model of a few hundred modules (measured with py-spy on the
    estimator's tests). The loop here reads a copy of the same table's plain dict (a dead module's entry leaves it by
    the reference's callback), so the peaks are the same (tests/test_measure.py compares them with the stock class)."""
    from types import SimpleNamespace

    from torch.distributed._tools.mem_tracker import MemTracker

    class _MemTracker(MemTracker):
        def _update_peak_stats(self, peak_state: Any) -> None:
            table = self.memory_tracking
            self.memory_tracking = SimpleNamespace(values=lambda: list(table.data.values()))  # a copy: a module
            # collected during the loop (its reference's callback edits the dict) cannot break the iteration
            try:
                super()._update_peak_stats(peak_state)
            finally:
                self.memory_tracking = table

    return _MemTracker


def make_mem_tracker(*external: Any) -> Any:
    """A torch MemTracker following `external` modules, optimizers and tensors.

    MemTracker installs a gradient hook on every parameter, which fails for a frozen one (requires_grad
    False, as in LoRA); frozen parameters are marked as already hooked, so they are tracked without one.
    """
    tracker = _tracker_class()()
    for obj in external:
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                if not p.requires_grad:
                    tracker._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())
    tracker.track_external(*external)
    return tracker


def peak_by_category(tracker: Any) -> dict[str, int]:
    """A MemTracker's peak snapshot as {category name: bytes}, summed over devices."""
    if not callable(getattr(tracker, "get_tracker_snapshot", None)):
        raise TypeError(f"tracker must be a torch.distributed._tools.mem_tracker.MemTracker (see make_mem_tracker), "
                        f"got {type(tracker).__name__}")
    totals: dict[str, int] = {}
    for per_device in tracker.get_tracker_snapshot("peak").values():
        for category, nbytes in per_device.items():
            name = getattr(category, "value", str(category))
            totals[name] = totals.get(name, 0) + nbytes
    return totals


def step_peak_by_category(
    step: Callable[[], Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
    steps: int = 2,
) -> dict[str, int]:
    """Peak bytes of a training step by category (Parameter, Gradient, Optstate, Activation, Temp, ...).

    Uses torch's MemTracker, which follows tensors rather than the allocator, so it works on CPU.
    `step()` runs one full training step; it runs `steps` times (the first creates optimizer state)
    and the peak over all of them is reported (by category at that moment, summed over devices).
    """
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")
    _check_module(model)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    tracker = make_mem_tracker(*(obj for obj in (model, optimizer) if obj is not None))
    with tracker:
        for i in range(steps):
            if i > 0:  # MemTracker refuses a second pass over the same modules without this
                tracker.reset_mod_stats()
            step()
    return peak_by_category(tracker)


ALLOCATOR_ROUNDING = 512  # the CUDA caching allocator hands out multiples of 512 bytes


def _storage_tensors(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensors that hold `t`'s memory: `t` itself, or for a wrapper subclass (torchao's 8-bit optimizer states,
    its FP8 tensors) the plain tensors inside it. A wrapper's own storage reports its logical size (4 bytes per
    element for an 8-bit Adam state), not what is allocated."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        for name in names:
            yield from _storage_tensors(getattr(t, name))
    else:
        yield t


def _allocator_bytes(tensors: Iterable[torch.Tensor], device: torch.device) -> int:
    """Bytes the caching allocator holds for the distinct storages among `tensors` that live on `device`."""
    seen: set[int] = set()
    total = 0
    for t in (inner for outer in tensors for inner in _storage_tensors(outer)):
        if t.device != device:
            continue  # e.g. Adam's step counters, kept on the CPU
        storage = t.untyped_storage()
        if storage._cdata not in seen and storage.nbytes() > 0:
            seen.add(storage._cdata)
            total += -(-storage.nbytes() // ALLOCATOR_ROUNDING) * ALLOCATOR_ROUNDING
    return total


def owned_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                      device: str | torch.device | None = None) -> int:
    """Allocator bytes of the state a training step owns, as it exists now: the model's parameters and buffers,
    its gradients, and the optimizer's state tensors on `device` (default: the first parameter's device)."""
    _check_module(model)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    params = list(model.parameters())
    dev = torch.device(device) if device is not None else (params[0].device if params else torch.device("cpu"))
    tensors: list[torch.Tensor] = params + list(model.buffers()) + [p.grad for p in params if p.grad is not None]
    if optimizer is not None:
        for group in optimizer.param_groups:
            tensors += [p.grad for p in group["params"] if p.grad is not None]
        tensors += [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return _allocator_bytes(tensors, dev)


def step_peak(step: Callable[[], Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
              warmup: int = 1) -> int:
    """Peak bytes of one call of `step()` after `warmup` calls: the state the step owns (parameters, buffers,
    gradients and optimizer state that exist when it starts) plus the peak it adds above that.

    On a CUDA GPU: `max_memory_allocated` minus what was allocated when the step began (so the cuBLAS
    workspaces, which are warmed up first, and every unrelated tensor alive in the kernel are left out), plus
    the owned state (`owned_state_bytes`). On a CPU or Apple GPU: MemTracker's total (it follows the model's
    and optimizer's tensors and those the step creates, nothing else)."""
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")
    _check_module(model)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    first = next(model.parameters(), None)
    if first is not None and first.device.type == "cuda":
        warm_up_cuda(first.device)
        for _ in range(warmup):
            step()
        torch.cuda.synchronize(first.device)
        owned = owned_state_bytes(model, optimizer, first.device)
        with cuda_peak(first.device, warm_up=False) as peak:
            step()
        return owned + peak.peak_above_start
    return step_peak_by_category(step, model, optimizer, steps=warmup + 1)["Total"]
