"""A simulated GPU for CPU-only machines: `torch.cuda` (or `torch.mps`) answers as a T4, an A10G, an H100 or an
Apple GPU would, while every tensor stays on the CPU. Timings are CPU timings and nothing it prints is a property of
a real GPU; but the memory counters follow the caching allocator's rules, so figures that depend on them (peaks,
reserved versus allocated, fragmentation, what empty_cache returns, a memory-fraction OOM) come out as a GPU's would
for the same tensors, and a chapter's figure assertions can run under it (tests/test_simulated_gpu_t4_quick.py).

How it works, once `install(profile)` has run in a process (tests/test_simulated_gpu.py runs it in a setup cell
before a notebook's first cell, through nbclient):
- torch.cuda's public functions (is_available, get_device_capability, get_device_properties, memory_allocated,
  max_memory_allocated, memory_reserved, memory_stats, memory_summary, mem_get_info, Event, Stream,
  set_per_process_memory_fraction, memory._record_memory_history, memory._snapshot, ...) are replaced by fakes;
  for the "mps" profile, torch.backends.mps.is_available and torch.mps's memory functions; for both,
  torch.accelerator's (current_accelerator, synchronize, memory_allocated, ...) and torch._C._get_accelerator.
- A TorchFunctionMode maps the simulated device to the CPU: `device="cuda"` keyword arguments, `.to("cuda")`,
  `.cuda()`, `module.to(device)`. The tensors it creates are marked, and `tensor.device` / `.is_cuda` report
  the simulated device for marked tensors (and for what is computed from them), so code that asks a tensor
  where it lives takes its GPU branch. `autocast("cuda")` applies CUDA's op policy, read from the installed
  ATen/autocast_mode.h, to the simulated tensors (FP16 by default, as on CUDA; the CPU's own autocast stays off).
- Kernel choice: scaled_dot_product_attention picks flash / memory-efficient / math by the profile's capability and
  the dtype as torch's sdp_utils does (a T4 runs BF16 attention on the math path, with its attention matrix), and
  _scaled_mm refuses what cuBLASLt refuses (capability below 8.9, layouts, dimensions not multiples of 16).
- Memory: every storage of a marked tensor is a malloc of `utils.lessons.allocator_model.CachingAllocatorModel` (a model
  of c10/cuda/CUDACachingAllocator.cpp: 512-byte rounding, small and large pools, split, reuse, empty_cache,
  max_split_size_mb, expandable_segments, the memory fraction), freed when the storage dies (a free is seen at the next
  allocation); the settings come from PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF as torch 2.13 reads them. One cuBLAS
  workspace is allocated at the first matmul and another at the first backward (8,519,680 B below sm90, 32 MiB on sm90),
  freed back to the allocator by torch._C._cuda_clearCublasWorkspaces(); 400-600 MiB of CUDA context (per profile;
  COURSE_SIM_CONTEXT_MIB) sit outside the allocator. An allocation past the fraction raises torch.OutOfMemoryError with
  CUDA's message.
- Events: a recorded event completes only when the host synchronises (event.synchronize(), a stream's or the
  device's synchronize, torch.accelerator.synchronize(), or a copy to the host such as .item() or .cpu()); before
  that query() is False and elapsed_time raises "device not ready", so a timing without a synchronize fails.
- Child processes: `install` exports COURSE_SIMULATED_GPU and puts tests/sim_site on PYTHONPATH; its
  sitecustomize installs the same profile in every Python child once it imports torch, and the child prints one
  line to stderr: "[simulated GPU] Tesla T4 (simulated on CPU) in child process <pid> (<program>)".
- A fake `nvidia-smi` on PATH (see `fake_nvidia_smi_dir`) prints memory.used: reserved + context.
- `run_notebook` ends every notebook with a cell that reports the state in force (memory fraction, allocator
  variables) and fails the run where it differs from what the chapter promises (end_state).
docs/simulation.md says what the simulation sees, what it cannot, and what covers the rest.
- `utils.lessons.timing.time_fn` takes one sample without warm-up: under the modes every op runs slowly in Python, and a
  timing here is never a figure anyway (a chapter's timing cells took 35 of its 75 s at five samples).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import operator
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from utils.lessons.allocator_model import AllocatorOutOfMemoryError, CachingAllocatorModel

MIB = 2**20
PROFILE_ENV = "COURSE_SIMULATED_GPU"


@dataclass(frozen=True)
class Profile:
    key: str
    kind: str  # "cuda" or "mps"
    name: str
    capability: tuple[int, int] | None
    total_memory: int
    multi_processor_count: int
    workspace: int  # cuBLAS workspace per handle
    context_mib: int = 0  # CUDA context and kernel images outside the allocator (COURSE_SIM_CONTEXT_MIB overrides)


# The default cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp, getDefaultWorkspaceSize at v2.13.0):
# ":4096:2:16:8" = 2 x 4 MiB + 8 x 16 KiB = 8,519,680 B (8.125 MiB) below sm90, ":4096:8" = 32 MiB on sm90.
WORKSPACE_SM75_89 = 4096 * 1024 * 2 + 16 * 1024 * 8
WORKSPACE_SM90 = 4096 * 8 * 1024
# The CUDA context (driver state, the kernels' code of torch, cuBLAS, cuDNN) is 400-600 MiB in practice, not a fixed
# figure: each profile sits somewhere in that range, and COURSE_SIM_CONTEXT_MIB moves it (tests run both ends).
CONTEXT_ENV = "COURSE_SIM_CONTEXT_MIB"
SMI_FILE_ENV = "COURSE_SIM_SMI_FILE"
CONTEXT_RANGE_MIB = (400, 600)

PROFILES: dict[str, Profile] = {
    "t4": Profile("t4", "cuda", "Tesla T4 (simulated on CPU)", (7, 5), 15_828_320_256, 40, WORKSPACE_SM75_89, 420),
    "a10g": Profile("a10g", "cuda", "NVIDIA A10G (simulated on CPU)", (8, 6), 24_146_608_128, 80, WORKSPACE_SM75_89,
                    500),
    "h100": Profile("h100", "cuda", "NVIDIA H100 80GB HBM3 (simulated on CPU)", (9, 0), 85_045_231_616, 132,
                    WORKSPACE_SM90, 600),
    "mps": Profile("mps", "mps", "Apple GPU (simulated on CPU)", None, 22_906_503_168, 0, 0),
}

_REAL_DEVICE = torch._C.TensorBase.device
_DATA = torch._C.TensorBase.data
_MARK = "_course_simulated"


def _marked(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.__dict__.get(_MARK, False)


def _mark(obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        obj.__dict__[_MARK] = True
    elif isinstance(obj, list | tuple):
        for item in obj:
            if isinstance(item, torch.Tensor):
                item.__dict__[_MARK] = True


def _any_marked(args: tuple, kwargs: dict) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.__dict__.get(_MARK, False):
                return True
        elif isinstance(a, list | tuple):
            for b in a:
                if isinstance(b, torch.Tensor) and b.__dict__.get(_MARK, False):
                    return True
    for a in kwargs.values():
        if isinstance(a, torch.Tensor) and a.__dict__.get(_MARK, False):
            return True
    return False


# StorageWeakRef.expired() without its two Python layers (torch/multiprocessing/reductions.py, torch/storage.py): the
# sweep below checks every live storage at most allocations, and those layers were two thirds of a chapter's time
_EXPIRED = torch.UntypedStorage._expired
_REF, _CDATA = operator.itemgetter(0), operator.attrgetter("cdata")  # (weak ref, handle) -> the ref's cdata, in C


class _State:
    """The simulated device: its caching allocator (utils.lessons.allocator_model, fed with the storages of the tensors
    that live "on the GPU"), its recorded history, and its event clock."""

    def __init__(self, profile: Profile, alloc_conf: str = "") -> None:
        self.profile = profile
        self.lock = threading.RLock()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}  # storage key -> (weak ref, allocator handle)
        self.context_bytes = context_mib(profile) * MIB if profile.kind == "cuda" else 0
        self.alloc_conf = alloc_conf
        self.allocator = CachingAllocatorModel.from_conf(profile.total_memory, alloc_conf,
                                                         context_bytes=self.context_bytes)
        self.fraction = 1.0
        self.workspaces: dict[str, int] = {}  # cuBLAS workspaces: which handle -> the allocator's block
        self.sdpa_choices: list[str] = []  # the SDPA kernel a GPU of this capability chose, call by call
        self.since_sweep = 0
        self.history: list[dict[str, Any]] | None = None
        self.history_stacks = "python"
        self.oom_observers: list[Any] = []  # torch._C._cuda_attach_out_of_memory_observer
        self.initialized = False  # CUDA initialises lazily: at the first tensor, set_device or init()
        self.events_recorded = 0  # the device's work queue, as a count of recorded events
        self.events_done = 0  # how far the host has synchronised with it

    def sweep(self) -> None:
        with self.lock:
            refs = map(_CDATA, map(_REF, self.live.values()))
            dead = list(itertools.compress(self.live.keys(), map(_EXPIRED, refs)))  # one loop in C, no Python frame
            for k in dead:
                _, handle = self.live.pop(k)
                self._free(handle)
            self.since_sweep = 0

    def _free(self, handle: int) -> None:
        size = self.allocator.block_size(handle)
        self.allocator.free(handle)
        if self.history is not None:
            self.history.append({"action": "free_completed", "addr": handle, "size": size, "stream": 0,
                                 "frames": []})

    def _malloc(self, nbytes: int) -> int:
        self.initialized = True
        try:
            handle = self.allocator.malloc(nbytes)
        except AllocatorOutOfMemoryError as exc:
            self._out_of_memory(nbytes)
            raise torch.OutOfMemoryError(f"{exc} (simulated)") from None
        if self.history is not None:
            self.history.append({"action": "alloc", "addr": handle, "size": self.allocator.block_size(handle),
                                 "stream": 0, "frames": _python_frames()})
        return handle

    def initialize(self) -> None:
        self.initialized = True

    def _out_of_memory(self, nbytes: int) -> None:
        """What the allocator does right before raising: an "oom" trace entry (with device_free), then every
        attached observer is called with (device, alloc_size, allowed or total bytes, device_free)."""
        total = self.profile.total_memory
        free = max(0, total - self.context_bytes - self.allocator.reserved)
        rounded = CachingAllocatorModel.round_size(nbytes)
        if self.history is not None:
            self.history.append({"action": "oom", "addr": free, "size": rounded, "device_free": free, "stream": 0,
                                 "frames": _python_frames()})
        allowed = int(self.fraction * total) if self.fraction < 1 else total
        for observer in list(self.oom_observers):
            observer(0, CachingAllocatorModel.allocation_size(rounded), allowed, free)

    def track(self, out: Any) -> None:
        tensors = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)] \
            if isinstance(out, list | tuple) else []
        with self.lock:
            for t in tensors:
                storage = t.untyped_storage()
                key = storage._cdata
                known = self.live.get(key)
                if known is not None and not _EXPIRED(known[0].cdata):
                    continue
                if known is not None:  # the address was reused by a new storage: the old one died
                    self._free(self.live.pop(key)[1])
                nbytes = storage.nbytes()
                if nbytes == 0:  # the caching allocator hands out no block for an empty storage
                    continue
                if len(self.live) < 2000 or self.since_sweep >= 64 or nbytes >= MIB:
                    self.sweep()  # frees are seen at the next allocation: peaks stay close to the real ones
                self.live[key] = (StorageWeakRef(storage), self._malloc(nbytes))
            self.since_sweep += 1

    def untrack(self, t: torch.Tensor) -> None:
        """`t` left the simulated GPU (a copy to the CPU): forget its storage, and its mark."""
        t.__dict__.pop(_MARK, None)
        with self.lock:
            known = self.live.pop(t.untyped_storage()._cdata, None)
            if known is not None:
                self._free(known[1])

    def workspace(self, which: str) -> None:
        """A cuBLAS workspace, taken from the caching allocator at a handle's first matmul and kept until
        torch._C._cuda_clearCublasWorkspaces() (never by empty_cache)."""
        if self.profile.workspace and which not in self.workspaces:
            with self.lock:
                self.workspaces[which] = self._malloc(self.profile.workspace)

    def clear_workspaces(self) -> None:
        """torch._C._cuda_clearCublasWorkspaces(): the workspaces go back to the caching allocator (cached, not
        released), and the next matmul of each thread creates its workspace again."""
        with self.lock:
            for handle in self.workspaces.values():
                self._free(handle)
            self.workspaces.clear()

    def stats(self) -> dict[str, int]:
        self.sweep()
        s = self.allocator.memory_stats()
        self.publish_smi(s["reserved_bytes.all.current"])
        return {"allocated": s["allocated_bytes.all.current"], "peak": s["allocated_bytes.all.peak"],
                "reserved": s["reserved_bytes.all.current"], "peak_reserved": s["reserved_bytes.all.peak"]}

    def publish_smi(self, reserved: int) -> None:
        """What the fake nvidia-smi prints as memory.used: this process's reserved memory plus its CUDA context
        (written where COURSE_SIM_SMI_FILE points, when set)."""
        path = os.environ.get(SMI_FILE_ENV)
        if path and self.profile.kind == "cuda":
            with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as f:
                f.write(f"{(reserved + self.context_bytes) // MIB}\n")

    def set_fraction(self, fraction: float) -> None:
        self.fraction = float(fraction)
        self.allocator.set_memory_fraction(min(1.0, float(fraction)))

    def empty_cache(self) -> None:
        with self.lock:
            self.sweep()
            self.allocator.empty_cache()

    # --- the event clock: work is done once the host synchronises with it ---

    def record_event(self) -> int:
        with self.lock:
            self.events_recorded += 1
            return self.events_recorded

    def synchronize(self, upto: int | None = None) -> None:
        """The host waits for the device: every event recorded (up to `upto`) has completed."""
        with self.lock:
            self.events_done = max(self.events_done, self.events_recorded if upto is None else upto)


def context_mib(profile: Profile) -> int:
    """The CUDA context of `profile` in MiB: COURSE_SIM_CONTEXT_MIB if set (within CONTEXT_RANGE_MIB), else the
    profile's."""
    forced = os.environ.get(CONTEXT_ENV, "").strip()
    if not forced:
        return profile.context_mib
    value = int(forced)
    if not CONTEXT_RANGE_MIB[0] <= value <= CONTEXT_RANGE_MIB[1]:
        raise ValueError(f"{CONTEXT_ENV} must be within {CONTEXT_RANGE_MIB} MiB, got {value}")
    return value


def _python_frames(limit: int = 12) -> list[dict[str, Any]]:
    frames = []
    frame = sys._getframe(3)
    while frame is not None and len(frames) < limit:
        frames.append({"filename": frame.f_code.co_filename, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


_STATE: _State | None = None
_MODES: list[Any] = []


def _is_sim_device(value: Any, kind: str) -> bool:
    if isinstance(value, torch.device):
        return value.type == kind
    if isinstance(value, str):
        return value.split(":")[0] == kind
    if isinstance(value, int) and not isinstance(value, bool):
        return kind == "cuda"
    return False


class _DeviceMode(TorchFunctionMode):
    """Maps the simulated device to the CPU and marks what lives "on the GPU"."""

    def __init__(self, state: _State) -> None:
        super().__init__()
        self.state = state
        self.kind = state.profile.kind

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: C901 (one dispatcher)
        kwargs = kwargs or {}
        kind = self.kind
        if func is torch.Tensor.to:
            return self._to(args, kwargs)
        if func is torch.Tensor.cuda:
            out = args[0].to("cpu", copy=True, non_blocking=kwargs.get("non_blocking", False))
            _mark(out)
            self.state.track(out)
            return out
        if func in _HOST_READS and args and _marked(args[0]):
            self.state.synchronize()  # a copy to the host waits for the device's queued work
        if func is torch.Tensor.cpu:
            if not _marked(args[0]):
                return func(*args, **kwargs)
            out = args[0].to("cpu", copy=True)
            self.state.untrack(out)
            return out
        if func is torch.Tensor.pin_memory:
            return args[0]
        if func is torch.Tensor.get_device:
            return 0 if _marked(args[0]) else func(*args, **kwargs)
        if getattr(func, "__name__", "") == "__set__" and getattr(func, "__self__", None) is _DATA:
            func(*args, **kwargs)
            if _marked(args[1]):
                _mark(args[0])
            else:
                args[0].__dict__.pop(_MARK, None)
            return None
        if func in _BACKWARD_FUNCS:
            return self._backward(func, args, kwargs)
        if kwargs.get("pin_memory"):
            kwargs = dict(kwargs, pin_memory=False)
        to_sim = False
        if "device" in kwargs:
            if _is_sim_device(kwargs["device"], kind):
                kwargs = dict(kwargs, device="cpu")
                to_sim = True
            elif kwargs["device"] is not None:
                out = func(*args, **kwargs)
                return out
        marked_in = to_sim or _any_marked(args, kwargs)
        context: Any = contextlib.nullcontext()
        if marked_in and _AUTOCAST_STACK and _AUTOCAST_STACK[-1][0]:  # a simulated CUDA (MPS) autocast region
            args, kwargs = _autocast_cast(func, args, kwargs, _AUTOCAST_STACK[-1][1], _AUTOCAST_STACK[-1][2])
        if marked_in and func is torch.nn.functional.scaled_dot_product_attention:
            context = self._sdpa_kernel(args, kwargs)
        with context:
            out = func(*args, **kwargs)
        if marked_in and isinstance(out, torch.Tensor | list | tuple):
            _mark(out)
            if to_sim:
                self.state.track(out)
        return out

    def _sdpa_kernel(self, args: tuple, kwargs: dict) -> Any:
        """The kernel a GPU of this capability picks for these inputs (or the error it raises), recorded in
        state().sdpa_choices; the CPU then runs the same class of kernel: the math path materialises the
        batch x heads x L x S attention matrix (and keeps it for backward), flash / memory-efficient do not."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
        given = dict(zip(names, args, strict=False)) | kwargs
        choice = sdpa_backend(self.state.profile, given["query"], given["key"], given.get("attn_mask"),
                              float(given.get("dropout_p", 0.0) or 0.0))
        self.state.sdpa_choices.append(choice)
        return sdpa_kernel([SDPBackend.MATH] if choice == "math" else [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])

    def _backward(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run a backward pass WITH this mode active, so that the Python it calls (saved-tensor hooks, checkpoint
        recomputation, custom Functions) sees the simulated device too. torch.autograd's own torch-function check
        is bypassed for the call (it would hand the call back to this mode for ever)."""
        module = sys.modules["torch.autograd"]
        check = module.__dict__["has_torch_function"]
        module.__dict__["has_torch_function"] = lambda *a, **k: False
        _AUTOCAST_STACK.append((False, torch.float16, False))  # CUDA's backward thread runs outside autocast
        try:
            with self:
                if func is torch.Tensor.backward:
                    names = ("gradient", "retain_graph", "create_graph", "inputs")
                    options = dict(zip(names, args[1:], strict=False)) | kwargs
                    return torch.autograd.backward(args[0], options.get("gradient"), options.get("retain_graph"),
                                                   options.get("create_graph", False),
                                                   inputs=options.get("inputs"))
                return func(*args, **kwargs)
        finally:
            _AUTOCAST_STACK.pop()
            module.__dict__["has_torch_function"] = check

    def _to(self, args: tuple, kwargs: dict) -> Any:
        self_t, rest = args[0], args[1:]
        kwargs = dict(kwargs)
        copy = bool(kwargs.pop("copy", False))
        if rest and isinstance(rest[0], torch.Tensor):  # .to(other): other's (simulated) device and dtype
            other = rest[0]
            device = torch.device(self.kind) if _marked(other) else _REAL_DEVICE.__get__(other)
            dtype = other.dtype
            non_blocking = bool(rest[1]) if len(rest) > 1 else bool(kwargs.get("non_blocking", False))
            memory_format = kwargs.get("memory_format")
        else:
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
        src = _marked(self_t)
        if device is None:
            dst = src
        elif device.type == self.kind:
            dst = True
        elif device.type == "cpu":
            dst = False
        else:
            return self_t.to(*rest, copy=copy, **kwargs)
        extra = {} if memory_format is None else {"memory_format": memory_format}
        if type(self_t) not in (torch.Tensor, torch.nn.Parameter):  # a subclass (e.g. torchao's NF4Tensor)
            # may refuse `copy`; its .to('cpu') on a CPU tensor is enough (the mark goes on what it returns)
            out = self_t.to("cpu", **({} if dtype is None else {"dtype": dtype}))
        else:
            out = self_t.to("cpu", dtype=dtype, non_blocking=non_blocking, copy=copy or src != dst, **extra)
        if dst:
            _mark(out)
            self.state.track(out)
        elif src:
            if not non_blocking:
                self.state.synchronize()
            self.state.untrack(out)
        return out


_BACKWARD_FUNCS = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad}
_HOST_READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.__bool__,
               torch.Tensor.__int__, torch.Tensor.__float__}
_ATEN_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_addmm_activation", "matmul"}


class _CounterMode(TorchDispatchMode):
    """Sees every aten op, forward and backward: marks what is computed from simulated-GPU tensors, counts its
    bytes, and allocates a cuBLAS workspace at the first matmul of the forward thread and of autograd's."""

    def __init__(self, state: _State) -> None:
        super().__init__()
        self.state = state

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if kwargs.get("pin_memory"):  # e.g. save_on_cpu's packing runs inside an op, below the function mode
            kwargs = dict(kwargs, pin_memory=False)
        if name in ("_pin_memory", "pin_memory"):
            return args[0].clone()
        if name == "is_pinned":
            return True
        marked_in = _any_marked(args, kwargs)
        if marked_in and name == "_scaled_mm":
            check_scaled_mm(self.state.profile, args, kwargs)
            fast = _fast_scaled_mm(args, kwargs)
            if fast is not None:
                self.state.workspace("forward thread")
                _mark(fast)
                self.state.track(fast)
                return fast
        if marked_in and name in _ATEN_MATMULS:
            in_backward = torch._C._current_graph_task_id() != -1
            self.state.workspace("autograd thread" if in_backward else "forward thread")
        out = half_matmul_in_fp32(func, args, kwargs) if marked_in and name in HALF_MATMULS else None
        out = func(*args, **kwargs) if out is None else out
        if marked_in and isinstance(out, torch.Tensor | list | tuple):
            _mark(out)
            self.state.track(out)
        return out


def sdpa_backend(profile: Profile, query: torch.Tensor, key: torch.Tensor, attn_mask: Any = None,
                 dropout_p: float = 0.0) -> str:
    """The SDPA kernel torch 2.13 picks on `profile` for these inputs ("flash", "efficient" or "math"), from the
    rules of aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (the parts the course's shapes reach): flash needs
    sm80+, FP16/BF16, 4-D inputs, no explicit mask and a head dim that is a multiple of 8 up to 256; the
    memory-efficient kernel runs FP32 and FP16 from sm50 and BF16 from sm80 only, head dim a multiple of 8 (4 in
    FP32); otherwise the math path. Each only where torch.backends.cuda's flag allows it (sdpa_kernel). So a T4 runs
    BF16 attention on the math path, with the attention matrix. An Apple GPU runs its math kernel. Raises
    torch's RuntimeError when no allowed kernel fits."""
    if profile.kind == "mps":
        return "math"
    cap, dtype, head = profile.capability, query.dtype, query.shape[-1]
    half = dtype in (torch.float16, torch.bfloat16)
    four_d = query.dim() == 4 and key.dim() == 4
    flash = (torch.backends.cuda.flash_sdp_enabled() and cap >= (8, 0) and half and four_d and attn_mask is None
             and head % 8 == 0 and head <= 256)
    efficient = (torch.backends.cuda.mem_efficient_sdp_enabled() and four_d and cap >= (5, 0)
                 and (dtype in (torch.float32, torch.float16) or (dtype == torch.bfloat16 and cap >= (8, 0)))
                 and head % (8 if half else 4) == 0)
    if flash:
        return "flash"
    if efficient:
        return "efficient"
    if torch.backends.cuda.math_sdp_enabled():
        return "math"
    raise RuntimeError(f"No available kernel. Aborting execution. (simulated {profile.name}: flash needs sm80+ and "
                       f"FP16/BF16, memory-efficient BF16 needs sm80+; got {dtype} on sm{cap[0]}{cap[1]})")


HALF_MATMULS = {"mm", "addmm", "bmm", "baddbmm"}


def half_matmul_in_fp32(func: Any, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """An FP16 or BF16 matmul computed in FP32 and rounded to its dtype, as a GPU's Tensor Cores accumulate (used
    for simulated-GPU tensors here and below tests/real_steps.py's meters). A CPU without native half-precision
    matmuls (AVX2 only: no AVX512-BF16, no AMX) runs torch's own at about 1 GFLOP/s against 100 in FP32, so chapters
    under a simulated T4 or Apple GPU took minutes per cell.
    Same shape, dtype and memory (the FP32 temporaries are not seen by the allocator model: a GPU's kernel has none);
    numerics are never a simulated figure. None (use torch's) for anything else: mixed dtypes, an `out=`, a tensor
    subclass (an FP8 or NF4 tensor dispatches its own matmul; the mode sees it before the subclass does)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    dtype = tensors[0].dtype if tensors else None
    if ("out" in kwargs or dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != dtype for t in tensors)
            or any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors)):
        return None
    wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
    return func(*wide, **kwargs).to(dtype)


def _fast_scaled_mm(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """_scaled_mm's result by an FP32 matmul of the FP8 operands times the scales (the CPU's own _scaled_mm is a
    naive loop: 44 s for n = 1,024 here, so chapter 08's FP8 sweep could not run under the simulation). Same shape,
    dtype and memory (the temporaries are not seen by the allocator model: a GPU's kernel has none); numerics are
    never a simulated figure. None (use torch's) for what it does not cover: an FP8 output, no out_dtype."""
    names = ("mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")
    given = dict(zip(names, args[1:], strict=False)) | kwargs
    out_dtype = given.get("out_dtype")
    if out_dtype is None or out_dtype.itemsize == 1 or given.get("scale_result") is not None:
        return None
    out = args[0].float() @ given["mat2"].float()  # FP8 values are exact in FP32; the FP32 matmul is fast anywhere
    out = out * given["scale_a"].float() * given["scale_b"].float()
    if given.get("bias") is not None:
        out = out + given["bias"].float()
    return out.to(out_dtype)


def check_scaled_mm(profile: Profile, args: tuple, kwargs: dict) -> None:
    """What cuBLASLt's FP8 GEMM refuses and the CPU's _scaled_mm accepts (aten/src/ATen/native/cuda/Blas.cpp):
    compute capability 8.9+, mat1 row-major and mat2 column-major, every dimension a multiple of 16, not two E5M2
    operands, FP32 scales."""
    mat1, mat2 = args[0], args[1]
    cap = profile.capability
    if profile.kind != "cuda" or cap < (8, 9):
        raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or "
                           f"8.9, or ROCm MI300+ (simulated {profile.name})")
    if mat1.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError("mat1 and mat2 must be matrices")
    if mat1.stride(1) != 1:
        raise RuntimeError("mat1 must be row-major (simulated cuBLASLt layout rule)")
    if mat2.stride(0) != 1:
        raise RuntimeError("mat2 must be col_major (simulated cuBLASLt layout rule)")
    if mat1.shape[1] % 16 or mat2.shape[0] % 16 or mat2.shape[1] % 16:
        raise RuntimeError(f"Expected both dimensions of mat2 and the trailing dimension of mat1 to be divisible by "
                           f"16, got mat1 {tuple(mat1.shape)}, mat2 {tuple(mat2.shape)}")
    if mat1.dtype == torch.float8_e5m2 and mat2.dtype == torch.float8_e5m2:
        raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported")
    scales = [kwargs.get("scale_a"), kwargs.get("scale_b")] + [a for a in args[2:4] if isinstance(a, torch.Tensor)]
    if any(isinstance(t, torch.Tensor) and t.dtype != torch.float32 for t in scales):
        raise RuntimeError("Both scale_a and scale_b must be float (fp32) tensors.")


def _device_property(self: torch.Tensor) -> torch.device:
    real = _REAL_DEVICE.__get__(self)
    if real.type == "cpu" and self.__dict__.get(_MARK, False) and _STATE is not None:
        return torch.device(_STATE.profile.kind, 0) if _STATE.profile.kind == "cuda" else torch.device("mps", 0)
    return real


class _FakeEvent:
    """An event on the simulated device: recorded work completes only when the host synchronises with it
    (`event.synchronize()`, a stream's or the device's synchronize, or a copy to the host such as `.item()`), so
    `query()` is False until then and `elapsed_time` raises as cudaEventElapsedTime does on unfinished work."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 **_: Any) -> None:
        self.enable_timing = enable_timing
        self.t: float | None = None
        self.seq: int | None = None

    def record(self, stream: Any = None) -> None:
        self.seq = state().record_event()
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        if self.seq is not None:
            state().synchronize(self.seq)

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return self.seq is None or state().events_done >= self.seq

    def elapsed_time(self, end: _FakeEvent) -> float:
        if not self.enable_timing or not end.enable_timing:
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.t is None or end.t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready (simulated: elapsed_time before the events completed; "
                               "call end.synchronize() or torch.cuda.synchronize() first)")
        return (end.t - self.t) * 1e3


class _FakeStream:
    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.priority = priority

    def synchronize(self) -> None:
        state().synchronize()

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> _FakeEvent:
        event = event or _FakeEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return state().events_done >= state().events_recorded

    def is_capturing(self) -> bool:
        return False

    def __enter__(self) -> _FakeStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


@dataclass
class _Properties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int = 50 * MIB
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    warp_size: int = 32
    uuid: str = "GPU-00000000-simulated"

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // MIB}MB, multi_processor_count={self.multi_processor_count})")


def _check_index(device: Any = None) -> int:
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        dev = torch.device(device) if isinstance(device, str) else device
        if not isinstance(dev, torch.device) or dev.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = 0 if dev.index is None else dev.index
    if index != 0:
        raise AssertionError(f"Invalid device id {index} (the simulated machine has one GPU)")
    return index


def _cuda_fakes(state: _State) -> dict[str, Any]:
    p = state.profile

    def memory_allocated(device: Any = None) -> int:
        _check_index(device)
        return state.stats()["allocated"]

    def max_memory_allocated(device: Any = None) -> int:
        _check_index(device)
        return state.stats()["peak"]

    def memory_reserved(device: Any = None) -> int:
        _check_index(device)
        return state.stats()["reserved"]

    def max_memory_reserved(device: Any = None) -> int:
        _check_index(device)
        return state.stats()["peak_reserved"]

    def reset_peak_memory_stats(device: Any = None) -> None:
        _check_index(device)
        state.sweep()
        state.allocator.reset_peak_stats()

    def reset_accumulated_memory_stats(device: Any = None) -> None:
        _check_index(device)
        state.allocator.reset_accumulated_stats()

    def empty_cache() -> None:
        state.empty_cache()

    def memory_stats(device: Any = None) -> dict[str, Any]:
        """torch.cuda.memory_stats(): the caching allocator model's statistics (utils/lessons/allocator_model.py)."""
        _check_index(device)
        state.sweep()
        return state.allocator.memory_stats()

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        _check_index(device)
        state.sweep()
        return state.allocator.summary(abbreviated=bool(abbreviated)).replace(
            "PyTorch CUDA memory summary, device ID 0", "PyTorch CUDA memory summary, SIMULATED")

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        _check_index(device)
        s = state.stats()
        return max(0, p.total_memory - s["reserved"] - state.context_bytes), p.total_memory

    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        if not isinstance(fraction, float | int) or isinstance(fraction, bool):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        _check_index(device)
        state.set_fraction(fraction)

    def get_per_process_memory_fraction(device: Any = None) -> float:
        return state.fraction

    def record_memory_history(enabled: str | None = "all", context: str | None = "all", stacks: str = "all",
                              max_entries: int = 2**63 - 1, device: Any = None, **_: Any) -> None:
        if enabled not in (None, "state", "all", True, False):
            raise ValueError(f"unknown enabled={enabled!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"unknown stacks={stacks!r}")
        if enabled in (None, False):
            state.history = None
        else:
            state.history = []
            state.history_stacks = stacks

    def snapshot(device: Any = None) -> dict[str, Any]:
        state.sweep()
        trace = [dict(e) for e in (state.history or [])]
        return {"segments": state.allocator.snapshot(), "device_traces": [trace],
                "allocator_settings": {"PYTORCH_ALLOC_CONF (simulated)": state.alloc_conf}}

    def dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
        import pickle

        with open(filename, "wb") as f:
            pickle.dump(snapshot(), f)

    rng = {"state": torch.get_rng_state().clone()}

    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return rng["state"].clone()

    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        rng["state"] = new_state.clone()

    class _DeviceContext:
        def __init__(self, device: Any) -> None:
            self.device = device

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: Any) -> bool:
            return False

    def noop_factory() -> Any:
        def noop(*args: Any, **kwargs: Any) -> None:
            return None
        return noop

    def synchronize(device: Any = None) -> None:
        _check_index(device)
        state.synchronize()

    def current_device() -> int:
        return 0

    return {
        "is_available": lambda: True,
        "is_initialized": lambda: state.initialized,
        "init": state.initialize,
        "_lazy_init": state.initialize,
        "device_count": lambda: 1,
        "current_device": current_device,
        "set_device": lambda device: (_check_index(device), state.initialize())[1],
        "get_device_capability": lambda device=None: (_check_index(device), p.capability)[1],
        "get_device_name": lambda device=None: (_check_index(device), p.name)[1],
        "get_device_properties": lambda device=None: (_check_index(device), _Properties(
            p.name, p.capability[0], p.capability[1], p.total_memory, p.multi_processor_count))[1],
        "is_bf16_supported": lambda including_emulation=True: p.capability >= (8, 0) or including_emulation,
        "get_arch_list": lambda: ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"],
        "synchronize": synchronize,
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved,
        "max_memory_reserved": max_memory_reserved,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
        "memory_stats": memory_stats,
        "memory_summary": memory_summary,
        "mem_get_info": mem_get_info,
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "get_per_process_memory_fraction": get_per_process_memory_fraction,
        "empty_cache": empty_cache,
        "Event": _FakeEvent,
        "Stream": _FakeStream,
        "current_stream": lambda device=None: _FakeStream(),
        "default_stream": lambda device=None: _FakeStream(),
        "stream": lambda stream=None: contextlib.nullcontext(stream),
        "device": _DeviceContext,
        "device_of": _DeviceContext,
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": lambda: [get_rng_state()],
        "set_rng_state_all": lambda states: set_rng_state(states[0]),
        "manual_seed": noop_factory(),
        "manual_seed_all": noop_factory(),
        "seed": noop_factory(),
        "seed_all": noop_factory(),
        "ipc_collect": noop_factory(),
        "_record_memory_history": record_memory_history,
        "_snapshot": snapshot,
        "_dump_snapshot": dump_snapshot,
    }


def _mps_fakes(state: _State) -> dict[str, Any]:
    """torch.mps's memory functions, from the same allocator model (MPS's own allocator differs: plausible only)."""
    p = state.profile

    def current_allocated_memory() -> int:
        return state.stats()["allocated"]

    def driver_allocated_memory() -> int:
        return state.stats()["reserved"] + 64 * MIB

    def set_per_process_memory_fraction(fraction: float) -> None:
        if not 0 <= fraction <= 2:
            raise ValueError(f"invalid fraction {fraction}")
        state.set_fraction(fraction)

    return {
        "current_allocated_memory": current_allocated_memory,
        "driver_allocated_memory": driver_allocated_memory,
        "recommended_max_memory": lambda: p.total_memory,
        "synchronize": lambda: state.synchronize(),
        "empty_cache": state.empty_cache,
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "device_count": lambda: 1,
        "manual_seed": lambda seed: None,
        "is_available": lambda: True,
    }


def _accelerator_fakes(state: _State) -> dict[str, Any]:
    """torch.accelerator (the device-generic API) answers for the simulated device, as on a GPU host."""
    kind = state.profile.kind

    def index(device: Any = None) -> int:
        if device is None or (isinstance(device, int) and not isinstance(device, bool) and device == 0):
            return 0
        dev = torch.device(device) if isinstance(device, str) else device
        if isinstance(dev, torch.device) and dev.type == kind and dev.index in (None, 0):
            return 0
        raise ValueError(f"Invalid device {device!r}: the simulated machine has one {kind} device (index 0)")

    def stat(key: str) -> Any:
        def read(device_index: Any = None, /) -> int:
            index(device_index)
            state.sweep()
            return state.allocator.memory_stats()[key]
        return read

    def memory_stats(device_index: Any = None, /) -> dict[str, Any]:
        index(device_index)
        state.sweep()
        return state.allocator.memory_stats()

    def reset_peak_memory_stats(device_index: Any = None, /) -> None:
        index(device_index)
        state.sweep()
        state.allocator.reset_peak_stats()

    def get_memory_info(device_index: Any = None, /) -> tuple[int, int]:
        index(device_index)
        total = state.profile.total_memory
        return max(0, total - state.stats()["reserved"] - state.context_bytes), total

    return {
        "current_accelerator": lambda check_available=False: torch.device(kind),
        "current_stream": lambda device=None, /: (index(device), _FakeStream())[1],
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device_index": lambda: 0,
        "current_device_idx": lambda: 0,
        "set_device_index": lambda device, /: index(device) and None,
        "set_device_idx": lambda device, /: index(device) and None,
        "synchronize": lambda device=None, /: (index(device), state.synchronize())[1],
        "memory_allocated": stat("allocated_bytes.all.current"),
        "max_memory_allocated": stat("allocated_bytes.all.peak"),
        "memory_reserved": stat("reserved_bytes.all.current"),
        "max_memory_reserved": stat("reserved_bytes.all.peak"),
        "memory_stats": memory_stats,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": lambda device_index=None, /: state.allocator.reset_accumulated_stats(),
        "empty_cache": state.empty_cache,
        "get_memory_info": get_memory_info,
    }


_SAVED: list[tuple[Any, str, Any]] = []
_MISSING = object()


def _patch(obj: Any, name: str, value: Any) -> None:
    _SAVED.append((obj, name, vars(obj).get(name, _MISSING)))
    setattr(obj, name, value)


_AUTOCAST_STACK: list[tuple[bool, torch.dtype, bool]] = []  # (enabled, dtype, cache) of the simulated regions
_CAST_CACHE: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}  # autocast's weight-cast cache


@functools.lru_cache(maxsize=1)
def cuda_autocast_policy() -> dict[str, str]:
    """CUDA autocast's op policy, read from this torch's ATen/autocast_mode.h (as chapter 04 reads it): op name ->
    "lower" (AT_FORALL_LOWER_PRECISION_FP), "fp32" (AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE) or "promote"
    (AT_FORALL_PROMOTE). MPS registers the same lists. Empty when the build ships no headers."""
    import re
    from pathlib import Path

    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        return {}
    text = header.read_text()
    policy: dict[str, str] = {}
    for macro, category in (("AT_FORALL_LOWER_PRECISION_FP", "lower"), ("AT_FORALL_FP32", "fp32"),
                            ("AT_FORALL_FP32_SET_OPT_DTYPE", "fp32"), ("AT_FORALL_PROMOTE", "promote")):
        found = re.search(rf"#define {macro}\(_\)(.*?)\n\n", text, re.S)
        for name in re.findall(r"_\((\w+)", found.group(1) if found else ""):
            policy.setdefault(name, category)
    return policy


# Python-level names of ops that reach an aten op of the policy under another name, or that are composite on CUDA
# (cross_entropy = log_softmax (FP32) + nll_loss (FP32): CUDA autocast sees the parts, so the whole runs in FP32).
_AUTOCAST_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow",
                     "cross_entropy": "nll_loss"}


def _autocast_cast(func: Any, args: tuple, kwargs: dict, dtype: torch.dtype, cache: bool = True
                   ) -> tuple[tuple, dict]:
    """Cast a call's simulated-GPU floating tensors as CUDA autocast would for `func` (cuda_autocast_policy): to
    `dtype` for the lower-precision ops (leaf weights cached for the region when `cache`, as autocast's cache does:
    cache_enabled), to FP32 for
    the FP32 ops, to the widest input type for the promote ops; any other op runs in its inputs' types."""
    name = getattr(func, "__name__", "")
    category = cuda_autocast_policy().get(_AUTOCAST_ALIASES.get(name, name))
    if category is None:
        return args, kwargs
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if category == "lower":
        target = dtype
    elif category == "fp32":
        target = torch.float32
    else:
        floats = [t.dtype for t in tensors if t.is_floating_point() and t.dtype != torch.float64]
        target = functools.reduce(torch.promote_types, floats) if floats else None
    if target is None:
        return args, kwargs

    def cast(a: Any) -> Any:
        if not (_marked(a) and a.is_floating_point() and a.dtype not in (torch.float64, target)):
            return a
        if cache and category == "lower" and a.is_leaf and a.requires_grad:  # autocast caches leaf weights' casts
            key = (id(a), target)
            hit = _CAST_CACHE.get(key)
            if hit is None or hit[0] is not a:
                hit = _CAST_CACHE[key] = (a, a.to(target))
            return hit[1]
        return a.to(target)

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def _patch_autocast(kind: str) -> None:
    """autocast(kind) follows CUDA's policy (cuda_autocast_policy, from the installed header) on the simulated
    device's tensors, not the CPU's: CPU autocast keeps softmax, layer_norm, exp and sum in the lower precision,
    CUDA's runs them in FP32. The CPU's own autocast stays off inside such a region; is_autocast_enabled(kind) and
    get_autocast_dtype(kind) answer from the simulated state (FP16 by default, as CUDA's)."""
    autocast = torch.amp.autocast_mode.autocast
    original_init, original_enter, original_exit = autocast.__init__, autocast.__enter__, autocast.__exit__

    @functools.wraps(original_init)
    def init(self: Any, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
             cache_enabled: bool | None = None) -> None:
        self._course_simulated = device_type == kind
        if device_type == kind:
            cache = torch.is_autocast_cache_enabled() if cache_enabled is None else bool(cache_enabled)
            self._course_state = (bool(enabled), torch.float16 if dtype is None else dtype, cache)
            device_type, enabled = "cpu", False  # the CPU's own autocast stays off
            dtype = self._course_state[1]
        original_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    @functools.wraps(original_enter)
    def enter(self: Any) -> Any:
        if getattr(self, "_course_simulated", False):
            _AUTOCAST_STACK.append(self._course_state)
        return original_enter(self)

    @functools.wraps(original_exit)
    def exit_(self: Any, *exc: Any) -> Any:
        if getattr(self, "_course_simulated", False) and _AUTOCAST_STACK:
            _AUTOCAST_STACK.pop()
            if not any(state[0] for state in _AUTOCAST_STACK):
                _CAST_CACHE.clear()  # autocast empties its cache when the outermost region exits
        return original_exit(self, *exc)

    _patch(autocast, "__init__", init)
    _patch(autocast, "__enter__", enter)
    _patch(autocast, "__exit__", exit_)
    real_enabled, real_dtype = torch.is_autocast_enabled, torch.get_autocast_dtype

    def is_autocast_enabled(*args: Any, **kwargs: Any) -> bool:
        device = args[0] if args else kwargs.get("device_type", "cuda" if kind == "cuda" else None)
        if device == kind:
            return bool(_AUTOCAST_STACK and _AUTOCAST_STACK[-1][0])
        return real_enabled(*args, **kwargs)

    def get_autocast_dtype(device_type: str) -> torch.dtype:
        if device_type == kind:
            return _AUTOCAST_STACK[-1][1] if _AUTOCAST_STACK else torch.float16
        return real_dtype(device_type)

    _patch(torch, "is_autocast_enabled", is_autocast_enabled)
    _patch(torch, "get_autocast_dtype", get_autocast_dtype)


SIM_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim_site")
_SAVED_ENV: dict[str, str | None] = {}


def _children_simulated(profile: str) -> None:
    """Every Python process started from here on (spawned workers, launch_script's ranks, `python -c` children)
    inherits COURSE_SIMULATED_GPU and finds tests/sim_site/sitecustomize.py on its PYTHONPATH, which installs the
    same simulated device when the child imports torch."""
    for name in (PROFILE_ENV, "PYTHONPATH"):
        _SAVED_ENV.setdefault(name, os.environ.get(name))
    os.environ[PROFILE_ENV] = profile
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SIM_SITE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([SIM_SITE, *paths])


def _patch_profiler_timeline(kind: str) -> None:
    """The simulated device's tensors live in host memory, so torch.profiler records their allocations as the
    CPU's: export_memory_timeline(device="cuda:0") exports the CPU timeline (on a GPU it is the GPU's), and a
    profiler asked for the CUDA activity profiles the CPU one (there is no CUDA to trace)."""
    profile_cls = torch.profiler.profile
    export = profile_cls.export_memory_timeline

    @functools.wraps(export)
    def export_memory_timeline(self: Any, path: str, device: str | None = None) -> None:
        if isinstance(device, str) and device.split(":")[0] == kind:
            device = "cpu"
        return export(self, path, device=device)

    _patch(profile_cls, "export_memory_timeline", export_memory_timeline)

    # This build has no CUPTI: asked for ProfilerActivity.CUDA, kineto spends about 30 ms on every op trying it
    # (a 2-layer step of chapter 07 took 75 s instead of 0.07 s). The simulated device's ops are CPU ops, which the
    # CPU activity records; on a GPU the chapter asks for both and gets both.
    original_init = profile_cls.__init__

    @functools.wraps(original_init)
    def init_without_cuda_activity(self: Any, *args: Any, activities: Any = None, **kwargs: Any) -> None:
        if activities is not None:
            activities = [a for a in activities if a != torch.profiler.ProfilerActivity.CUDA] or \
                [torch.profiler.ProfilerActivity.CPU]
        original_init(self, *args, activities=activities, **kwargs)

    _patch(profile_cls, "__init__", init_without_cuda_activity)


def install(profile: str = "t4") -> Profile:
    """Simulate `profile` ("t4", "h100" or "mps") in this process, for good (a test kernel is thrown away)."""
    global _STATE
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    if _STATE is not None:
        raise RuntimeError(f"a simulated GPU is already installed here: {_STATE.profile.key}")
    p = PROFILES[profile]
    importlib.import_module("torch._dynamo")  # its rule tables are built from the real torch.cuda functions
    # the allocator settings this process was started with, read as torch 2.13 reads them
    _STATE = state = _State(p, CachingAllocatorModel.alloc_conf_from_env(os.environ))
    _children_simulated(profile)
    if p.kind == "cuda":
        for name, fake in _cuda_fakes(state).items():
            _patch(torch.cuda, name, fake)
            if name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                        "reset_peak_memory_stats", "memory_stats", "memory_summary", "mem_get_info",
                        "set_per_process_memory_fraction", "empty_cache", "_record_memory_history", "_snapshot",
                        "_dump_snapshot", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
                        "get_per_process_memory_fraction"):
                _patch(torch.cuda.memory, name, fake)
        _patch(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
        _patch(torch._C, "_cuda_attach_out_of_memory_observer", state.oom_observers.append)
        _patch(torch._C, "_cuda_clearCublasWorkspaces", state.clear_workspaces)
    else:
        fakes = _mps_fakes(state)
        _patch(torch.backends.mps, "is_available", fakes.pop("is_available"))
        _patch(torch.backends.mps, "is_built", lambda: True)
        for name, fake in fakes.items():
            _patch(torch.mps, name, fake)
    for name, fake in _accelerator_fakes(state).items():
        if hasattr(torch.accelerator, name):
            _patch(torch.accelerator, name, fake)
    # what FSDP2's default mesh, DeviceMesh and other device-generic code ask (torch._C._get_accelerator)
    _patch(torch._C, "_get_accelerator", lambda: torch.device(p.kind))
    _patch_autocast(p.kind)
    _patch_profiler_timeline(p.kind)
    _patch(torch.Tensor, "device", property(_device_property))
    _patch(torch.Tensor, "is_cuda", property(lambda self: _device_property(self).type == "cuda"))
    _patch(torch.Tensor, "is_mps", property(lambda self: _device_property(self).type == "mps"))
    _patch(torch.Tensor, "is_cpu", property(lambda self: _device_property(self).type == "cpu"))
    parameter_new = torch.nn.Parameter.__new__

    def new_parameter(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        param = parameter_new(cls, data, requires_grad)
        if _marked(data):
            _mark(param)
        return param

    _patch(torch.nn.Parameter, "__new__", staticmethod(new_parameter))
    make_wrapper = torch._C.TensorBase._make_wrapper_subclass

    def make_wrapper_subclass(cls: type, *args: Any, **kwargs: Any) -> Any:
        # Tensor subclasses (torchao's quantized optimizer states, NF4) build their wrapper with device=p.device:
        # a simulated device there would give a wrapper whose ops dispatch to CUDA kernels.
        simulated_device = _is_sim_device(kwargs.get("device"), p.kind)
        if simulated_device:
            kwargs["device"] = "cpu"
        out = make_wrapper(cls, *args, **kwargs)
        if simulated_device:
            _mark(out)
        return out

    _patch(torch.Tensor, "_make_wrapper_subclass", staticmethod(make_wrapper_subclass))
    _one_sample_timings()
    _MODES[:] = [_DeviceMode(state), _CounterMode(state)]
    for mode in _MODES:
        mode.__enter__()
    return p


def _one_sample_timings() -> None:
    """Time every call once, without warm-up, and compare configurations over two rounds after one warm-up call
    (the chapters' control flow is unchanged: a Timing or TimingTable comes back; no test reads a timing's value).
    A simulated run times the CPU, not a GPU: chapter 05 at quick size under the simulated T4 took 62 s with its
    eleven rounds, 55 s with two (AMD EPYC, 2 cores)."""
    timing = importlib.import_module("utils.lessons.timing")
    time_fn, compare = timing.time_fn, timing._compare_timings

    def two_rounds(configs: Any, repeats: int, warmup: int, min_sample_s: float, *args: Any) -> Any:
        return compare(configs, 2, 1, 0.0, *args)  # arguments checked by compare_timings, before this call

    _patch(timing, "_compare_timings", two_rounds)

    @functools.wraps(time_fn)
    def one_sample(fn: Any, *, warmup: int = 2, repeats: int = 5, **kwargs: Any) -> Any:
        if isinstance(warmup, int) and isinstance(repeats, int) and warmup >= 0 and repeats >= 1:
            warmup, repeats = 0, 1  # bad arguments still reach time_fn and its errors
        return time_fn(fn, warmup=warmup, repeats=repeats, **kwargs)

    _patch(timing, "time_fn", one_sample)


def uninstall() -> None:
    """Undo `install` (for tests that simulate a GPU inside the test process)."""
    global _STATE
    _AUTOCAST_STACK.clear()
    _CAST_CACHE.clear()
    for mode in reversed(_MODES):
        mode.__exit__(None, None, None)
    _MODES.clear()
    while _SAVED:
        obj, name, value = _SAVED.pop()
        if value is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, value)
    _STATE = None
    for name, value in _SAVED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _SAVED_ENV.clear()


@contextlib.contextmanager
def simulated(profile: str = "t4"):
    """`install(profile)` for the duration of a block."""
    p = install(profile)
    try:
        yield p
    finally:
        uninstall()


def state() -> _State:
    if _STATE is None:
        raise RuntimeError("no simulated GPU is installed")
    return _STATE


def fake_nvidia_smi_dir(folder: str, used_mib: int = 1234) -> str:
    """Write an executable `nvidia-smi` into `folder` for memory.used queries: it prints what the simulated process
    last published (reserved + CUDA context, in the file COURSE_SIM_SMI_FILE names), else `used_mib`."""
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w", encoding="utf-8") as f:
        var = f'"${SMI_FILE_ENV}"'
        f.write(f"#!/bin/sh\nif [ -n {var} ] && [ -s {var} ]; then cat {var}; else echo '{used_mib}'; fi\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def setup_cell_source(profile: str) -> str:
    """The code cell that installs the simulation in a notebook's kernel before its first cell (a kernel started
    from a simulated process already has it from tests/sim_site: then the cell checks the profile)."""
    here = os.path.abspath(__file__)
    return (
        "import importlib.util as _ilu, sys as _sys\n"
        "import torch as _torch  # under COURSE_SIMULATED_GPU, tests/sim_site installs the simulation here\n"
        "if 'course_simulated_gpu' not in _sys.modules:\n"
        f"    _spec = _ilu.spec_from_file_location('course_simulated_gpu', {here!r})\n"
        "    _sys.modules['course_simulated_gpu'] = _ilu.module_from_spec(_spec)\n"
        "    _spec.loader.exec_module(_sys.modules['course_simulated_gpu'])\n"
        "_simgpu = _sys.modules['course_simulated_gpu']\n"
        "if _simgpu._STATE is None:\n"
        f"    _simgpu.install({profile!r})\n"
        f"assert _simgpu.state().profile.key == {profile!r}, _simgpu.state().profile.key\n"
        "_simgpu.record_start_state()\n"
        "del _ilu, _sys, _torch\n"
    )


END_MARK = "[simulated GPU] end state "
_START_ALLOC_ENV: dict[str, str | None] = {}


def _alloc_env() -> dict[str, str | None]:
    from utils.lessons.allocator_model import ALLOC_CONF_VARIABLES

    return {name: os.environ.get(name) for name in ALLOC_CONF_VARIABLES}


def record_start_state() -> None:
    """Remember the allocator variables in force when the notebook starts (the setup cell calls this)."""
    _START_ALLOC_ENV.clear()
    _START_ALLOC_ENV.update(_alloc_env())


def end_state() -> dict[str, Any]:
    """What a chapter leaves in force at its end, against what it promises: the memory fraction (COURSE_TIER's cap
    on a larger GPU, else 1.0) and the allocator variables it started with; and the SDPA kernels a GPU chose."""
    from utils.lessons.sizes import TIER_ENV, tier_for_memory, tier_memory_fraction

    st = state()
    expected = 1.0
    forced = os.environ.get(TIER_ENV, "").strip()
    if st.profile.kind == "cuda" and forced and tier_for_memory(st.profile.total_memory) > int(forced):
        expected = tier_memory_fraction(int(forced), st.profile.total_memory)
    return {"fraction": st.fraction, "expected_fraction": expected if st.profile.kind == "cuda" else st.fraction,
            "alloc_env": _alloc_env(), "start_alloc_env": dict(_START_ALLOC_ENV),
            "sdpa": {c: st.sdpa_choices.count(c) for c in sorted(set(st.sdpa_choices))},
            "workspaces": sorted(st.workspaces)}


def end_state_problems(end: dict[str, Any]) -> list[str]:
    """Differences between the state a chapter leaves and the state it promises (see end_state)."""
    problems = []
    if abs(end["fraction"] - end["expected_fraction"]) > 1e-9:
        problems.append(f"the memory fraction in force at the end is {end['fraction']:.4f}, not "
                        f"{end['expected_fraction']:.4f} (COURSE_TIER's cap or 1.0): a cell did not restore it")
    if end["alloc_env"] != end["start_alloc_env"]:
        problems.append(f"the allocator variables changed: {end['start_alloc_env']} -> {end['alloc_env']}")
    return problems


@dataclass(frozen=True)
class CellFailure:
    """A cell that ended in an error (or printed a traceback) under the simulated GPU."""

    cell: int  # index in the notebook as committed (the setup cell is not counted)
    error: str  # "ename: evalue" (first line)
    source_head: str  # the cell's first line, to find it

    def __str__(self) -> str:
        return f"cell {self.cell} ({self.source_head!r}): {self.error}"


def run_notebook(path: str, profile: str, *, size: str = "tiny", cell_timeout: int = 180,
                 extra_env: dict[str, str] | None = None) -> tuple[list[CellFailure], list[str], float]:
    """Run a notebook in a fresh kernel with `profile` simulated; returns (failures, printed lines, seconds).

    Every cell runs even after a failure (allow_errors), so one run reports every failing cell. The profile
    "cpu" runs the notebook with no simulation at all (a baseline: does a cell fail at this size anyway?).
    """
    import tempfile

    import nbformat
    from nbclient import NotebookClient

    from utils.course.kernels import notebook_client_config

    if profile not in PROFILES and profile != "cpu":
        raise ValueError(f"profile must be one of {sorted(PROFILES)} or 'cpu', got {profile!r}")
    nb = nbformat.read(path, as_version=4)
    setup = "pass" if profile == "cpu" else setup_cell_source(profile)
    nb.cells.insert(0, nbformat.v4.new_code_cell(setup))
    if profile != "cpu":  # the state the chapter leaves in force (state carried between cells)
        nb.cells.append(nbformat.v4.new_code_cell(
            "import json as _json, sys as _sys\n"
            f"print({END_MARK!r} + _json.dumps(_sys.modules['course_simulated_gpu'].end_state()))\n"))
    with tempfile.TemporaryDirectory(prefix="simgpu-") as tmp:
        env = dict(os.environ, COURSE_SIZE=size, COURSE_RECORD="0", MPLBACKEND="Agg",
                   PYTHONWARNINGS="ignore::DeprecationWarning")
        if profile != "cpu" and PROFILES[profile].kind == "cuda":
            env["PATH"] = fake_nvidia_smi_dir(tmp) + os.pathsep + env.get("PATH", "")
            env[SMI_FILE_ENV] = os.path.join(tmp, "memory_used_mib")
        env.update(extra_env or {})
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                                config=notebook_client_config(),
                                resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
        t0 = time.perf_counter()
        client.execute(env=env)
        seconds = time.perf_counter() - t0
    failures, lines = [], []
    for index, cell in enumerate(nb.cells[1:]):
        if cell.cell_type != "code":
            continue
        head = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                evalue = str(out.get("evalue", "")).strip().splitlines()
                failures.append(CellFailure(index, f"{out.ename}: {evalue[0] if evalue else ''}"[:300], head))
            elif out.output_type == "stream":
                text = out.text
                lines += text.splitlines()
                if "Traceback (most recent call last)" in text:
                    last = [t for t in text.strip().splitlines() if t.strip()][-1]
                    failures.append(CellFailure(index, f"printed a traceback: {last}"[:300], head))
    ends = [line for line in lines if line.startswith(END_MARK)]
    if profile != "cpu":
        if not ends:
            failures.append(CellFailure(len(nb.cells) - 1, "the end-state cell printed nothing", "end state"))
        else:
            import json

            for problem in end_state_problems(json.loads(ends[-1][len(END_MARK):])):
                failures.append(CellFailure(len(nb.cells) - 2, f"state carried between cells: {problem}",
                                            "end state"))
    for failure in failures:
        print(failure)
    return failures, lines, seconds
