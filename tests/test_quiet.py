"""utils.lessons.quiet drops exactly the known noise: torchao's .so load failures, _pytree's Enum deprecation and
Kineto's USDT lines, while other warnings still reach stderr."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torchao")

SCRIPT = """
import logging, torch
from torch.profiler import profile, ProfilerActivity
from utils.lessons.quiet import import_torchao, native_stderr_silenced
import_torchao()
import torchao.prototype.mx_formats  # registers more enums with _pytree
with native_stderr_silenced():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        torch.ones(8) * 2
logging.getLogger("torchao").warning("a real torchao warning")
print("done")
"""


def test_known_noise_is_dropped_and_other_warnings_stay() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().endswith("done")
    assert "Failed to load" not in out.stderr
    assert "Enum subclass" not in out.stderr
    assert "USDT" not in out.stderr
    assert "a real torchao warning" in out.stderr
