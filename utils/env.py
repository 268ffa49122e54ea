"""What this machine can do: device, compute capability, native number formats, Transformer Engine.

Chapter 00 renders `device_info()` as a table; later chapters gate GPU-only parts on its fields.
The gates are computed from the compute capability, never from `torch.cuda.is_bf16_supported()`,
which answers True on a T4 (capability 7.5) because BF16 is emulated there.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from dataclasses import dataclass

import torch

BF16_MIN_CAPABILITY = (8, 0)  # Ampere: BF16 Tensor Cores
TF32_MIN_CAPABILITY = (8, 0)  # Ampere: TF32 Tensor Cores
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper: FP8 Tensor Cores


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
    """Try to import Transformer Engine; any failure (it raises RuntimeError without a GPU) is reported."""
    if importlib.util.find_spec("transformer_engine") is None:
        return TransformerEngineStatus(False, None, "not installed (optional; chapter 08 emulates FP8 instead)")
    try:
        import transformer_engine  # noqa: F401  (the import is the test)
    except Exception as exc:  # TE raises RuntimeError, OSError, ImportError... depending on what is missing
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return TransformerEngineStatus(False, None, f"installed but not importable: {type(exc).__name__}: {first_line}")
    version = getattr(transformer_engine, "__version__", "unknown")
    return TransformerEngineStatus(True, version, f"importable, version {version}")


@dataclass(frozen=True)
class DeviceInfo:
    """One record of what this machine offers to the course."""

    device: str  # "cuda" or "cpu"
    name: str
    capability: tuple[int, int] | None
    gates: Gates
    total_memory: int | None  # bytes, CUDA only
    free_memory: int | None  # bytes, CUDA only
    torch_version: str
    cuda_version: str | None
    python_version: str
    cpu_count: int
    transformer_engine: TransformerEngineStatus

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def rows(self) -> list[tuple[str, str]]:
        """The record as (field, value) rows for a table."""

        def gib(n: int | None) -> str:
            return "n/a (no GPU)" if n is None else f"{n / 2**30:.2f} GiB"

        def yes_no(flag: bool, what: str) -> str:
            if not self.is_cuda:
                return "no GPU"
            return f"yes ({what})" if flag else f"no (needs capability {what})"

        cap = "n/a (no GPU)" if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"
        return [
            ("device", self.device),
            ("name", self.name),
            ("compute capability", cap),
            ("BF16 native", yes_no(self.gates.bf16_native, "8.0+")),
            ("TF32", yes_no(self.gates.tf32, "8.0+")),
            ("FP8 Tensor Cores", yes_no(self.gates.fp8, "8.9+")),
            ("GPU memory total", gib(self.total_memory)),
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
    """Describe `device` ("cuda", "cpu", or None for CUDA when available, else CPU)."""
    if device is not None and device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda', 'cpu' or None, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch.cuda.is_available() is False on this machine")
    use_cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if use_cuda:
        index = torch.cuda.current_device()
        capability = tuple(torch.cuda.get_device_capability(index))
        free, total = torch.cuda.mem_get_info(index)
        name = torch.cuda.get_device_name(index)
    else:
        capability, free, total, name = None, None, None, _cpu_name()
    return DeviceInfo(
        device="cuda" if use_cuda else "cpu",
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
    """The device experiments run on: the current CUDA device if there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def package_versions(names: tuple[str, ...] = ("torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab",
                                               "nbval", "transformer_engine")) -> list[tuple[str, str]]:
    """(package, version or 'not installed') for each name, read from the installed metadata."""
    from importlib import metadata

    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError("names must be a tuple of package names (strings)")
    rows = [("python", sys.version.split()[0])]
    for name in names:
        try:
            rows.append((name, metadata.version(name.replace("_", "-"))))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    return rows
