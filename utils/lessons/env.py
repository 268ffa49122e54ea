"""What this machine can do: device, compute capability, native number formats, Transformer Engine.

Chapter 00 renders `device_info()` as a table; later chapters gate GPU-only parts on its fields.
The gates are computed from the compute capability, never from `torch.cuda.is_bf16_supported()`,
which answers True on a T4 (capability 7.5) because BF16 is emulated there.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from utils.validate import check_bool, check_choice, check_int, check_number, check_str

BF16_MIN_CAPABILITY = (8, 0)  # Ampere: BF16 Tensor Cores
TF32_MIN_CAPABILITY = (8, 0)  # Ampere: TF32 Tensor Cores
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper: FP8 Tensor Cores
TORCH_MIN_VERSION = (2, 11)  # pyproject.toml: torch>=2.11,<3 (the range this course is tested on)
TORCH_MAX_MAJOR = 3
TF32_OVERRIDE_ENV = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"  # set in NVIDIA's containers: FP32 matmuls become TF32
DEVICES = ("cuda", "mps", "cpu")


@dataclass(frozen=True)
class Gates:
    """Which number formats run natively on Tensor Cores at a compute capability."""

    bf16_native: bool
    tf32: bool
    fp8: bool


def capability_gates(capability: tuple[int, int] | None) -> Gates:
    """Native BF16, TF32 and FP8 support for a CUDA compute capability (None: no GPU)."""
    if capability is None:
        return Gates(bf16_native=False, tf32=False, fp8=False)
    if (
        not isinstance(capability, tuple)
        or len(capability) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in capability)
    ):
        raise TypeError(f"capability must be a (major, minor) tuple of non-negative ints or None, got {capability!r}")
    return Gates(
        bf16_native=capability >= BF16_MIN_CAPABILITY,
        tf32=capability >= TF32_MIN_CAPABILITY,
        fp8=capability >= FP8_MIN_CAPABILITY,
    )


@dataclass(frozen=True)
class TransformerEngineStatus:
    """Whether `import transformer_engine` works here, its version, or why not."""

    available: bool
    version: str | None
    message: str


def transformer_engine_status() -> TransformerEngineStatus:
    """Try to import Transformer Engine's PyTorch part; any failure (it raises RuntimeError without a GPU) is
    reported. `import transformer_engine` alone is not enough: its __init__ swallows the ImportError of
    `transformer_engine.pytorch` (a wheel built for another torch, a missing framework extension)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return TransformerEngineStatus(False, None, "not installed (optional; chapter 08 emulates FP8 instead)")
    try:
        import transformer_engine
        import transformer_engine.pytorch  # noqa: F401  (the import is the test)
    except Exception as exc:  # TE raises RuntimeError, OSError, ImportError... depending on what is missing
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return TransformerEngineStatus(False, None, f"installed but not importable: {type(exc).__name__}: {first_line}")
    version = getattr(transformer_engine, "__version__", "unknown")
    return TransformerEngineStatus(True, version, f"importable (transformer_engine.pytorch), version {version}")


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '2.13.0+cu126' or '2.5.0a0+872d972e41.nv24.08'."""
    check_str("text", text)
    match = re.match(r"\s*(\d+)\.(\d+)", text)
    if not match:
        raise ValueError(f"text must start with a version such as '2.13.0', got {text!r}")
    return int(match.group(1)), int(match.group(2))


def torch_version_note(version: str | None = None) -> str:
    """One line on whether this torch is inside the course's tested range (torch>=2.11,<3), and what to expect
    if not (NVIDIA's PyTorch containers may ship an older torch)."""
    version = torch.__version__ if version is None else version
    major, minor = parse_version(version)
    low = f"{TORCH_MIN_VERSION[0]}.{TORCH_MIN_VERSION[1]}"
    if (major, minor) < TORCH_MIN_VERSION:
        return (f"torch {version} is OLDER than the tested range (torch>={low},<{TORCH_MAX_MAJOR}): most chapters "
                f"run, but some behaviour differs (e.g. float8 casts before 2.12 turn values >= 480 into NaN "
                f"instead of saturating at 448); install torch>={low} for the course's results")
    if major >= TORCH_MAX_MAJOR:
        return (f"torch {version} is NEWER than the tested range (torch>={low},<{TORCH_MAX_MAJOR}): "
                "APIs the course uses may have moved")
    return f"torch {version} is inside the tested range (torch>={low},<{TORCH_MAX_MAJOR})"


def tf32_override_note(environ: dict[str, str] | None = None) -> str:
    """One line on TORCH_ALLOW_TF32_CUBLAS_OVERRIDE: torch 2.13 reads it with c10::utils::check_env, which honours
    only "1" (FP32 matmuls start in TF32 on capability 8.0+, whatever the notebook's baseline assumes) and "0"; any
    other value is ignored with a warning. The override sets the starting precision, so
    torch.get_float32_matmul_precision() reports what is in force."""
    env = os.environ if environ is None else environ
    value = env.get(TF32_OVERRIDE_ENV)
    if value is None or value.strip() in ("", "0"):
        return f"{TF32_OVERRIDE_ENV} is not set: FP32 matmuls are FP32 unless a cell turns TF32 on"
    if value.strip() != "1":
        return (f"{TF32_OVERRIDE_ENV}={value} is ignored by torch (only 1 and 0 count): FP32 matmuls are FP32 unless "
                "a cell turns TF32 on")
    return (f"{TF32_OVERRIDE_ENV}=1 is set (NVIDIA containers do this): on GPUs of capability 8.0+ FP32 matmuls "
            "start in TF32 (torch.get_float32_matmul_precision() says 'high'), so FP32 baselines are TF32; unset it "
            "for true FP32")


@contextmanager
def tf32_matmuls(enabled: bool) -> Iterator[None]:
    """Turn TF32 for CUDA matmuls and cuDNN convolutions on or off inside the block; restored in `finally`,
    even when the block raises (an out-of-memory error included)."""
    check_bool("enabled", enabled)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def parse_nvidia_smi_mib(text: str) -> int | None:
    """Bytes from one line of `nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits` (MiB), or None
    when the text is not a number ("[N/A]", "[Not Supported]", an error message, nothing)."""
    if not isinstance(text, str):
        return None
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    return int(first) * 2**20 if first.isdigit() else None


def device_uuid(index: int | None = None) -> str | None:
    """nvidia-smi's identifier ("GPU-<uuid>") of torch's CUDA device `index` (default: the current one), or None
    without CUDA or when this torch build reports no UUID. torch numbers devices after CUDA_VISIBLE_DEVICES and in
    CUDA's order (fastest first), nvidia-smi by PCI bus over every GPU: only the UUID names the same device in both
    (torch 2.13 exposes it as `get_device_properties(i).uuid`, a `_CUuuid` whose str is the 8-4-4-4-12 hex form:
    torch/csrc/cuda/Module.cpp, registerCudaDeviceProperties)."""
    if index is not None:
        check_int("index", index, minimum=0)
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device() if index is None else index
    if index >= torch.cuda.device_count():
        raise ValueError(f"index must name a visible CUDA device (0..{torch.cuda.device_count() - 1}), got {index}")
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    text = str(uuid).strip() if uuid is not None else ""
    if not text:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _nvidia_smi(args: list[str], timeout_s: float) -> str | None:
    """nvidia-smi's standard output, or None when it is missing, fails or times out (never raises)."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_smi_memory_used(index: int | None = None, *, uuid: str | None = None,
                           timeout_s: float = 10.0) -> int | None:
    """GPU memory in use as nvidia-smi reports it (bytes; this process's CUDA context and cache included, and
    every other process's) for torch's CUDA device `index` (default: the current one), queried by the device's UUID
    (`device_uuid`) so that CUDA_VISIBLE_DEVICES and CUDA's device order cannot point nvidia-smi at another GPU; or
    for `uuid` ("GPU-..." as nvidia-smi lists it) when given. None when there is no such device, no UUID, or
    nvidia-smi is missing, fails, times out or prints no number."""
    if index is not None:
        check_int("index", index, minimum=0)
    if uuid is not None:
        check_str("uuid", uuid)
    check_number("timeout_s", timeout_s, positive=True)
    if uuid is None:
        uuid = device_uuid(index)
    if uuid is None:
        return None
    out = _nvidia_smi([f"--id={uuid}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], timeout_s)
    return None if out is None else parse_nvidia_smi_mib(out)


# The CUDA builds of torch on download.pytorch.org/whl/cuXYZ the course documents (see
# https://pytorch.org/get-started/locally/ for the current list), and the oldest Linux driver each CUDA major
# version needs (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver Version"; within
# a major version, minor version compatibility lets a 12.x build run on any 12.x driver).
TORCH_CUDA_WHEELS: tuple[str, ...] = ("12.6", "12.8", "13.0")
MIN_DRIVER_FOR_CUDA_MAJOR: dict[int, str] = {12: "525", 13: "580"}


def parse_driver_cuda_version(text: str | None) -> str | None:
    """The CUDA version the driver supports, from nvidia-smi's banner ("CUDA Version: 12.4"), or None."""
    if not isinstance(text, str):
        return None
    match = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", text)
    return match.group(1) if match else None


def nvidia_smi_cuda_version(*, timeout_s: float = 10.0) -> str | None:
    """The highest CUDA version this machine's NVIDIA driver supports (nvidia-smi's banner), or None when
    nvidia-smi is missing, fails or says nothing about it. Never raises for the tool's sake."""
    check_number("timeout_s", timeout_s, positive=True)
    return parse_driver_cuda_version(_nvidia_smi([], timeout_s))


def _wheel_for(driver: tuple[int, int]) -> str | None:
    """The torch CUDA build to install for a driver: the newest one not newer than the driver, else the oldest of
    the driver's major version (minor version compatibility), else None."""
    wheels = [parse_version(w) for w in TORCH_CUDA_WHEELS]
    fitting = [w for w in wheels if w <= driver]
    same_major = [w for w in wheels if w[0] == driver[0]]
    best = max(fitting) if fitting else (min(same_major) if same_major else None)
    return None if best is None else f"cu{best[0]}{best[1]}"


def cuda_build_note(torch_cuda: str | None, driver_cuda: str | None, gpu_visible: bool,
                    torch_version: str | None = None) -> str | None:
    """One line comparing torch's CUDA build (`torch.version.cuda`; None for a CPU build) with the CUDA version the
    driver supports (nvidia-smi; None: no NVIDIA driver here, and then None is returned), with the remedy when
    torch cannot see a GPU the driver has: which `make lab TORCH=...` to run."""
    if torch_cuda is not None:
        check_str("torch_cuda", torch_cuda)
    if driver_cuda is not None:
        check_str("driver_cuda", driver_cuda)
    check_bool("gpu_visible", gpu_visible)
    version = torch.__version__ if torch_version is None else check_str("torch_version", torch_version)
    if driver_cuda is None:
        return None
    driver = parse_version(driver_cuda)
    built = None if torch_cuda is None else parse_version(torch_cuda)
    if gpu_visible:
        return (f"torch {version} (CUDA {torch_cuda or '?'}) sees the GPU; the driver supports CUDA up to "
                f"{driver_cuda}")
    wheel = _wheel_for(driver)
    base = version.split("+")[0]
    remedy = (f'make lab TORCH="torch=={base} --index-url https://download.pytorch.org/whl/{wheel}"' if wheel
              else f"update the NVIDIA driver (torch's CUDA builds are {', '.join(TORCH_CUDA_WHEELS)})")
    if built is None:
        return (f"torch {version} is a CPU-only build, but nvidia-smi reports an NVIDIA driver (CUDA up to "
                f"{driver_cuda}): {remedy}")
    if built[0] > driver[0]:  # within a major version, minor version compatibility applies
        need = MIN_DRIVER_FOR_CUDA_MAJOR.get(built[0])
        return (f"torch {version} is built for CUDA {torch_cuda}, which needs an NVIDIA driver "
                f"{'>= ' + need if need else 'for CUDA ' + str(built[0])} (this one supports CUDA up to "
                f"{driver_cuda}), so torch sees no GPU: {remedy}" + (", or update the driver" if wheel else ""))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = (f"CUDA_VISIBLE_DEVICES={visible!r} may hide it" if visible is not None
             else "check `nvidia-smi` (a GPU held in an exclusive compute mode, or a driver/library mismatch)")
    return f"torch {version} (CUDA {torch_cuda}) suits this driver (CUDA up to {driver_cuda}) but sees no GPU: {where}"


def cuda_driver_check(*, timeout_s: float = 10.0) -> str | None:
    """`cuda_build_note` for this machine: torch.version.cuda against nvidia-smi's driver (None without an NVIDIA
    driver). Asks torch only whether a GPU is visible (torch.cuda.is_available: no CUDA context is created)."""
    check_number("timeout_s", timeout_s, positive=True)
    return cuda_build_note(torch.version.cuda, nvidia_smi_cuda_version(timeout_s=timeout_s),
                           bool(torch.cuda.is_available()))


ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@dataclass(frozen=True)
class AllocatorSettings:
    """The caching allocator's settings in force: which environment variable torch read, its value, and the
    variables set but ignored."""

    variable: str | None
    value: str
    ignored: tuple[str, ...]

    def __str__(self) -> str:
        if self.variable is None:
            return "allocator settings: torch's defaults (no PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF set)"
        line = f"allocator settings in force: {self.variable}={self.value!r}"
        if self.ignored:
            line += f" (torch reads the first set of {', '.join(ALLOC_CONF_VARIABLES)}; ignored: " \
                    f"{', '.join(self.ignored)})"
        return line


def allocator_settings(environ: dict[str, str] | None = None) -> AllocatorSettings:
    """The allocator settings torch 2.13 applies for `environ` (default: this process's environment).

    torch parses the FIRST variable set of PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF and
    ignores the others: c10/core/AllocatorConfig.cpp, AcceleratorAllocatorConfig::instance() (the generic keys:
    max_split_size_mb, expandable_segments, garbage_collection_threshold, roundup_power2_divisions) and
    c10/cuda/CUDAAllocatorConfig.h, CUDAAllocatorConfig::instance() (the CUDA keys), same order. So when both are
    set, PYTORCH_CUDA_ALLOC_CONF wins (tests/test_env.py checks it against the installed torch). Set or clear both."""
    if environ is not None and not (isinstance(environ, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in environ.items())):
        raise TypeError("environ must be a dict of str to str or None")
    env = os.environ if environ is None else environ
    found = [v for v in ALLOC_CONF_VARIABLES if v in env]
    if not found:
        return AllocatorSettings(None, "", ())
    return AllocatorSettings(found[0], env[found[0]], tuple(found[1:]))


def mps_available() -> bool:
    """Whether an Apple GPU can be used through MPS here."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def mps_memory() -> dict[str, int]:
    """Apple GPU memory as torch.mps reports it (bytes): tensors allocated, what the Metal driver holds for
    this process (allocated + cached), and the recommended working-set size (unified memory shared with
    the CPU, so there is no fixed "GPU memory total")."""
    if not mps_available():
        raise RuntimeError("mps_memory needs an Apple GPU (torch.backends.mps.is_available() is False)")
    return {"current_allocated": int(torch.mps.current_allocated_memory()),
            "driver_allocated": int(torch.mps.driver_allocated_memory()),
            "recommended_max": int(torch.mps.recommended_max_memory())}


MPS_CAN = ("FP32, FP16 and BF16 tensors and autocast('mps'); memory figures from torch.mps "
           "(current_allocated_memory, driver_allocated_memory, recommended_max_memory)")
MPS_CANNOT = ("no FP8 (no float8 matmuls, no Transformer Engine), no CUDA allocator views (max_memory_allocated, "
              "memory_stats, memory snapshots: peaks come from MemTracker instead), no Tensor Core compute "
              "capability; memory is unified with the CPU's, so the GPU's 'total' is a recommended working set")


@dataclass(frozen=True)
class DeviceInfo:
    """One record of what this machine offers to the course."""

    device: str  # "cuda", "mps" or "cpu"
    name: str
    capability: tuple[int, int] | None
    gates: Gates
    total_memory: int | None  # bytes; CUDA: the device's memory; MPS: the recommended working set
    free_memory: int | None  # bytes; CUDA: mem_get_info; MPS: recommended working set less the driver's
    torch_version: str
    cuda_version: str | None
    python_version: str
    cpu_count: int
    transformer_engine: TransformerEngineStatus

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def is_mps(self) -> bool:
        return self.device == "mps"

    def rows(self) -> list[tuple[str, str]]:
        """The record as (field, value) rows for a table."""

        def gib(n: int | None) -> str:
            return "n/a (no GPU)" if n is None else f"{n / 2**30:.2f} GiB"

        def yes_no(flag: bool, what: str) -> str:
            if self.is_mps:
                return "no (Apple GPU: no CUDA compute capability)"
            if not self.is_cuda:
                return "no GPU"
            return f"yes ({what})" if flag else f"no (needs capability {what})"

        if self.capability is not None:
            cap = f"{self.capability[0]}.{self.capability[1]}"
        else:
            cap = "n/a (Apple GPU)" if self.is_mps else "n/a (no GPU)"
        mem_total = "GPU memory total (MPS: recommended working set)" if self.is_mps else "GPU memory total"
        return [
            ("device", self.device),
            ("name", self.name),
            ("compute capability", cap),
            ("BF16 native", yes_no(self.gates.bf16_native, "8.0+")),
            ("TF32", yes_no(self.gates.tf32, "8.0+")),
            ("FP8 Tensor Cores", yes_no(self.gates.fp8, "8.9+")),
            (mem_total, gib(self.total_memory)),
            ("GPU memory free", gib(self.free_memory)),
            ("Transformer Engine", self.transformer_engine.message),
            ("torch", self.torch_version),
            ("CUDA (torch build)", self.cuda_version or "none (CPU build)"),
            ("Python", self.python_version),
            ("CPU cores", str(self.cpu_count)),
        ]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_info(device: str | None = None) -> DeviceInfo:
    """Describe `device` ("cuda", "mps", "cpu", or None for `default_device()`'s type).

    On CUDA the current device is described (not device 0): its name, capability, memory total and free.
    """
    if device is not None:
        check_choice("device", device, DEVICES)
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch.cuda.is_available() is False on this machine")
    if device == "mps" and not mps_available():
        raise ValueError("device='mps' was asked for but torch.backends.mps.is_available() is False on this machine")
    kind = default_device().type if device is None else device
    capability, free, total = None, None, None
    if kind == "cuda":
        index = torch.cuda.current_device()
        capability = tuple(torch.cuda.get_device_capability(index))
        total = int(torch.cuda.get_device_properties(index).total_memory)
        try:
            free, total = (int(v) for v in torch.cuda.mem_get_info(index))
        except RuntimeError:  # some drivers and MIG slices refuse cudaMemGetInfo: keep the properties' total
            free = None
        name = torch.cuda.get_device_name(index)
    elif kind == "mps":
        memory = mps_memory()
        total = memory["recommended_max"]
        free = max(0, total - memory["driver_allocated"])
        name = f"Apple GPU (MPS) on {platform.machine() or 'arm64'}"
    else:
        name = _cpu_name()
    return DeviceInfo(
        device=kind,
        name=name,
        capability=capability,  # type: ignore[arg-type]
        gates=capability_gates(capability),  # type: ignore[arg-type]
        total_memory=total,
        free_memory=free,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        python_version=platform.python_version(),
        cpu_count=os.cpu_count() or 1,
        transformer_engine=transformer_engine_status(),
    )


def default_device() -> torch.device:
    """The device experiments run on: the current CUDA device if there is one, else an Apple GPU (MPS) if
    there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def package_versions(names: tuple[str, ...] = ("torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab",
                                               "nbval", "transformer_engine")) -> list[tuple[str, str]]:
    """(package, version or 'not installed') for each name, read from the installed metadata."""
    from importlib import metadata

    if isinstance(names, str) or not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
        raise TypeError("names must be a tuple of package names (strings)")
    rows = [("python", sys.version.split()[0])]
    for name in names:
        try:
            rows.append((name, metadata.version(name.replace("_", "-"))))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    return rows
