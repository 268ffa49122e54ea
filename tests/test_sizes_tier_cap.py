"""COURSE_TIER rehearses a smaller GPU with the smaller GPU's memory (issue 21, bug 13): the tier caps the caching
allocator with torch.cuda.set_per_process_memory_fraction, once per process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from utils.lessons import sizes


@pytest.fixture
def fake_h100(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: calls.append((f, d)))
    monkeypatch.setattr(sizes, "_CAPPED", {})
    return calls


def test_course_tier_16_caps_an_h100_at_a_t4s_memory(fake_h100, monkeypatch):
    monkeypatch.setenv("COURSE_TIER", "16")
    monkeypatch.setenv("COURSE_SIZE", "full")
    assert sizes.experiment_size() == "full" and sizes.memory_tier() == 16
    assert fake_h100 == [(pytest.approx(14.5 / 80), 0)], "capped once, at the tier's usable bytes"


def test_no_cap_without_course_tier_or_on_a_gpu_that_small(fake_h100, monkeypatch):
    monkeypatch.delenv("COURSE_TIER", raising=False)
    assert sizes.memory_tier() == 80 and fake_h100 == []
    monkeypatch.setenv("COURSE_TIER", "80")
    assert sizes.memory_tier() == 80 and fake_h100 == []  # the GPU is of that tier already: no cap


def test_tier_memory_fraction():
    assert sizes.tier_memory_fraction(16, 80 * 2**30) == pytest.approx(14.5 / 80)
    assert sizes.tier_memory_fraction(80, 16 * 2**30) == 1.0
    with pytest.raises(ValueError, match="tier"):
        sizes.tier_memory_fraction(12, 2**30)
    with pytest.raises(TypeError, match="total_bytes"):
        sizes.tier_memory_fraction(16, 1.5)
    with pytest.raises(ValueError, match="total_bytes"):
        sizes.tier_memory_fraction(16, 0)
