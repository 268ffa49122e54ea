"""Out-of-memory-safe experiments: catch the error, drop references, empty the cache, keep the kernel alive.

Packaged copies of chapter 07's lesson code (the notebook writes each one out and explains it; tests/test_oom.py
and tests/test_ch07_notebook_ties.py check that these agree with the notebook's versions):
- `run_oom_safe(fn, ...)`: an out-of-memory error becomes a result; the traceback is dropped before cleaning up.
- `run_step_oom_safe(step, optimizer, ...)`: the same for a training step, with the gradients set to None in a
  `finally`, whether the step failed in forward, backward or the optimizer step (a probe that fails in backward
  would otherwise leave `.grad` filled, and the next probe would start above its baseline).
- `memory_fraction_cap(fraction)`: `torch.cuda.set_per_process_memory_fraction` for a block, the fraction in
  force before it always restored in a `finally` (stand in for a smaller GPU; used by chapters 07 and 09). Not 1.0:
  under COURSE_TIER the fraction in force is the tier's cap, which must outlive the block (issue 33, bug 2).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from utils.validate import check_instance, check_number

_OOM_TEXTS = ("out of memory", "can't allocate memory", "cannot allocate memory")


@dataclass
class OomResult:
    """What an experiment returned, or why it did not (out of memory), in one line."""

    ok: bool
    value: Any = None
    message: str = ""

    def __bool__(self) -> bool:
        return self.ok


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory error: torch.OutOfMemoryError (CUDA, MPS) or the CPU allocator's RuntimeError."""
    if not isinstance(exc, BaseException):
        raise TypeError(f"exc must be an exception, got {type(exc).__name__}")
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXTS)


def free_memory() -> None:
    """Collect garbage and return cached CUDA blocks to the driver (no-op for the cache on CPU)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_oom_safe(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> OomResult:
    """Run `fn(*args, **kwargs)`; an out-of-memory error becomes OomResult(ok=False, message=...).

    The traceback that holds the failed frame's tensors is dropped before the cache is emptied, so the
    memory really comes back. Other exceptions propagate: they are bugs, not a full GPU.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    try:
        return OomResult(ok=True, value=fn(*args, **kwargs))
    except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError; the CPU allocator raises RuntimeError
        if not is_oom(exc):
            raise
        text = str(exc).strip()
        message = text.splitlines()[0] if text else "out of memory"
    # Only here, outside the except block, are the exception and its traceback (with the failed frames' tensors)
    # gone: cleaning up inside the block would free nothing that the frames still reference.
    free_memory()
    return OomResult(ok=False, message=f"out of memory, skipped and cleaned up: {message}")


def run_step_oom_safe(step: Callable[..., Any], optimizer: torch.optim.Optimizer, *args: Any,
                      **kwargs: Any) -> OomResult:
    """`run_oom_safe(step, *args, **kwargs)`, then `optimizer.zero_grad(set_to_none=True)` in a `finally`:
    a step that ran out of memory in backward or in the optimizer step leaves no gradient behind."""
    check_instance("optimizer", optimizer, torch.optim.Optimizer)
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")
    try:
        return run_oom_safe(step, *args, **kwargs)
    finally:
        optimizer.zero_grad(set_to_none=True)


@contextmanager
def memory_fraction_cap(fraction: float, device: int | None = None) -> Iterator[int]:
    """Cap this process's CUDA allocator at `fraction` of the GPU's memory for the block (stand in for a
    smaller GPU); yields the cap in bytes and always restores the fraction in force before it when the block ends
    (utils.lessons.sizes.memory_fraction_in_force: COURSE_TIER's cap, or 1.0)."""
    fraction = check_number("fraction", fraction, positive=True, maximum=1.0)
    if device is not None:
        from utils.validate import check_int

        check_int("device", device, minimum=0)
    if not torch.cuda.is_available():
        raise RuntimeError("memory_fraction_cap needs a CUDA GPU (set_per_process_memory_fraction is CUDA's)")
    index = torch.cuda.current_device() if device is None else device
    from utils.lessons.sizes import memory_fraction_in_force

    total = torch.cuda.get_device_properties(index).total_memory
    in_force = memory_fraction_in_force(index)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    try:
        yield int(fraction * total)
    finally:
        torch.cuda.set_per_process_memory_fraction(in_force, index)
        free_memory()
