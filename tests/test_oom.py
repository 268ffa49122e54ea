"""utils.lessons.oom: the packaged OOM-safe runner, the training-step probe that clears gradients whatever failed (issue
12, bug 5), and the memory-fraction cap that is always reset (checked with torch.cuda simulated)."""

from __future__ import annotations

import types
import weakref

import pytest
import torch
from torch import nn

from utils.lessons import oom


def _model_and_opt():
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer"])
def test_step_probe_leaves_no_gradient(phase):
    model, opt = _model_and_opt()
    kept = []

    def step(batch):
        x = torch.randn(batch, 4)
        kept.append(weakref.ref(x))
        if phase == "forward":
            raise torch.OutOfMemoryError("CUDA out of memory (planted)")
        model(x).sum().backward()
        if phase == "backward":
            raise torch.OutOfMemoryError("CUDA out of memory (planted)")
        raise torch.OutOfMemoryError("CUDA out of memory in step (planted)")

    result = oom.run_step_oom_safe(step, opt, 3)
    assert not result and result.message.startswith("out of memory, skipped and cleaned up: CUDA out of memory")
    assert all(p.grad is None for p in model.parameters())
    assert all(r() is None for r in kept)  # the traceback (and the failed frame's tensors) is gone


def test_step_probe_passes_values_and_bugs():
    model, opt = _model_and_opt()

    def good(batch):
        loss = model(torch.randn(batch, 4)).sum()
        loss.backward()
        return loss.item()

    assert isinstance(oom.run_step_oom_safe(good, opt, 2).value, float)
    assert all(p.grad is None for p in model.parameters())

    def buggy(batch):
        model(torch.randn(batch, 4)).sum().backward()
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        oom.run_step_oom_safe(buggy, opt, 2)
    assert all(p.grad is None for p in model.parameters())  # the finally ran anyway


def test_step_probe_bad_input():
    with pytest.raises(TypeError, match="optimizer"):
        oom.run_step_oom_safe(lambda: 1, "sgd")
    _, opt = _model_and_opt()
    with pytest.raises(TypeError, match="step"):
        oom.run_step_oom_safe(3, opt)


def test_is_oom():
    assert oom.is_oom(torch.OutOfMemoryError("x"))
    assert oom.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4 EiB"))
    assert oom.is_oom(RuntimeError("CUDA error: out of memory"))
    assert not oom.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not oom.is_oom(ValueError("out of memory"))


def test_memory_fraction_cap_needs_cuda_and_validates():
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            with oom.memory_fraction_cap(0.5):
                pass
    for bad, kind in ((0, ValueError), (1.5, ValueError), (-0.1, ValueError), ("half", TypeError), (True, TypeError),
                      (float("nan"), ValueError)):
        with pytest.raises(kind, match="fraction"):
            with oom.memory_fraction_cap(bad):
                pass
    with pytest.raises(ValueError, match="device"):
        with oom.memory_fraction_cap(0.5, device=-1):
            pass


def test_memory_fraction_cap_always_resets(monkeypatch):
    """With torch.cuda simulated: the cap is set, yields its bytes, and is reset to 1.0 even after an OOM."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=16 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: calls.append((f, d)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    with oom.memory_fraction_cap(0.25) as cap:
        assert cap == 4 * 2**30
    assert calls == [(0.25, 0), (1.0, 0)]
    calls.clear()
    with pytest.raises(torch.OutOfMemoryError):
        with oom.memory_fraction_cap(0.5):
            raise torch.OutOfMemoryError("CUDA out of memory")
    assert calls == [(0.5, 0), (1.0, 0)]
