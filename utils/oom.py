"""Out-of-memory-safe experiments: catch the error, drop references, empty the cache, keep the kernel alive."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class OomResult:
    """What an experiment returned, or why it did not (out of memory), in one line."""

    ok: bool
    value: Any = None
    message: str = ""

    def __bool__(self) -> bool:
        return self.ok


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
    message = ""
    try:
        return OomResult(ok=True, value=fn(*args, **kwargs))
    except torch.OutOfMemoryError as exc:  # CUDA's (and MPS's) allocator ran out
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
    except RuntimeError as exc:  # the CPU allocator reports as RuntimeError
        text = str(exc)
        if "out of memory" not in text.lower() and "can't allocate memory" not in text.lower():
            raise
        message = text.strip().splitlines()[0]
    # The exception (and its traceback's frames with their tensors) is gone here.
    free_memory()
    return OomResult(ok=False, message=f"out of memory, skipped and cleaned up: {message}")
