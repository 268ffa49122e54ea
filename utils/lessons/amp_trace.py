"""Which op ran in which dtype: discovered by watching the dispatcher, never typed in (chapter 04).

Chapter 04 writes the same tracer out in its section 2 (`OpDtypes`, `op_dtypes`); tests/test_ch04_tracer.py runs
the notebook's version and this one on the same model and requires the same table. This copy checks its arguments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Views, copies, casts and factories: no arithmetic, so no precision decision worth listing.
SKIP = frozenset({"detach", "view", "_unsafe_view", "t", "transpose", "expand", "permute", "split", "select", "slice",
                  "unsqueeze", "squeeze", "reshape", "clone", "copy_", "empty", "zeros", "ones", "fill_",
                  "lift_fresh", "arange", "alias", "as_strided", "new_empty", "empty_like", "zeros_like",
                  "ones_like", "_to_copy"})


def _float_dtypes(tree: Any) -> str:
    """The floating dtypes of the tensors in `tree`, sorted and joined by '+' ('-' when there are none)."""
    names = {str(t.dtype)[6:] for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()}
    return "+".join(sorted(names)) or "-"


class _OpDtypes(TorchDispatchMode):
    """Sees every aten op after autocast has cast its inputs; counts (op, input dtypes, output dtypes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[tuple[str, str, str]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in SKIP:
            ins, outs = _float_dtypes((args, kwargs)), _float_dtypes(out)
            if (ins, outs) != ("-", "-"):
                self.seen[(name, ins, outs)] += 1
        return out


def op_dtypes(fn: Callable[[], Any], *, device_type: str = "cpu", dtype: torch.dtype | None = torch.bfloat16
              ) -> list[tuple[str, str, str, int]]:
    """Run `fn()` (under autocast to `dtype` on `device_type`, or plain if dtype is None) and list each aten
    op with the floating dtypes it received and produced, and how often: (op, inputs, outputs, count)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    if dtype not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16, torch.float16 or None, got {dtype!r}")
    mode = _OpDtypes()
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None), mode:
        fn()
    return sorted((op, i, o, n) for (op, i, o), n in mode.seen.items())
