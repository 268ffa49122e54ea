"""The scenes' live-tensor meter: the bytes of the tensor storages created inside a block and still alive, and
their peak (9.3's and 9.5's peaks, 7.3's live bytes at each optimizer step), and the torch functions that would
switch it off from the learner's code, which the checks watch (`own_work`'s `direct`)."""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.utils._python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LivePeak(TorchDispatchMode):
    """The peak of the bytes of tensor storages created inside the block and still alive (CPU or GPU): each
    operator's outputs are counted when created and subtracted when their storage is freed. Tensors created before
    the block are not counted, except that a view or an in-place op's output is counted as new unless its storage's
    address is in `existing` (the storages alive before the block, e.g. the model's parameters and the data)."""

    def __init__(self, existing: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._alive: dict[int, Any] = {key: None for key in existing}

    def _free(self, key: int, nbytes: int) -> None:
        if self._alive.pop(key, None) is not None:
            self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes and key not in self._alive:
                    self._alive[key] = weakref.finalize(storage, self._free, key, nbytes)
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
        return out


# What switches off or reaches the scenes' peak meter (LivePeak, a TorchDispatchMode) from the learner's code: its
# modes popped or disabled while the learner's work runs unseen (review s15's red team, A2: the colleague's script
# unchanged, and the full loss, under _disable_current_modes, earned 9.3's and 9.5's marks). torch's own use of
# them (the meter's exit pops its mode) is not the learner's.
_DISPATCH = torch.utils._python_dispatch
MODE_SWITCHES = (_DISPATCH._disable_current_modes, _DISPATCH._pop_mode, _DISPATCH._pop_mode_temporarily,
                 _DISPATCH._get_current_dispatch_mode, _DISPATCH._get_current_dispatch_mode_stack,
                 torch._C._unset_dispatch_mode, torch._C._set_dispatch_mode, torch._C._pop_torch_dispatch_stack,
                 torch._C._push_on_torch_dispatch_stack, torch._C._get_dispatch_stack_at)
