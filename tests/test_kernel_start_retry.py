"""The suite's nbval kernels are started again when one dies before its first reply (a TCP port taken by another
process between jupyter_client's pick and the kernel's bind): conftest._start_kernel_retrying."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _root_conftest(monkeypatch):
    """A second copy of the root conftest; nbval's function, which loading it replaces, is put back afterwards."""
    import nbval.kernel

    monkeypatch.setattr(nbval.kernel, "start_new_kernel", nbval.kernel.start_new_kernel)
    spec = importlib.util.spec_from_file_location("_root_conftest_under_test", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_that_dies_before_its_first_reply_is_started_again(monkeypatch):
    module = _root_conftest(monkeypatch)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "km", "kc"

    monkeypatch.setattr(module, "_START_NEW_KERNEL", flaky)
    assert module._start_kernel_retrying(kernel_name="python3") == ("km", "kc")
    assert len(calls) == 3


def test_other_failures_and_a_third_death_are_raised(monkeypatch):
    module = _root_conftest(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(module, "_START_NEW_KERNEL", broken)
    with pytest.raises(RuntimeError, match="no such kernel"):
        module._start_kernel_retrying()
    deaths = []

    def dies(*args, **kwargs):
        deaths.append(1)
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(module, "_START_NEW_KERNEL", dies)
    with pytest.raises(RuntimeError, match="kernel_info"):
        module._start_kernel_retrying()
    assert len(deaths) == 3
