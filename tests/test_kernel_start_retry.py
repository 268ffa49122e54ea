"""Kernels that die before their first reply (a TCP port taken by another process between jupyter_client's pick
and the kernel's bind) are started again: the suite's nbval kernels (conftest._start_kernel_retrying) and the
grader's (utils.grade._start_kernel)."""

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


def test_a_grading_kernel_that_dies_at_birth_is_started_again():
    """utils.grade._start_kernel: the same port race in the grader (a grade never depends on it: no cell has run)."""
    from utils.grade import _start_kernel

    class Client:
        def __init__(self, deaths: int, message: str = "Kernel died before replying to kernel_info") -> None:
            self.deaths, self.message, self.started, self.km = deaths, message, 0, None

        def create_kernel_manager(self):
            return object()

        def start_new_kernel(self) -> None:
            self.started += 1

        def start_new_kernel_client(self) -> None:
            if self.started <= self.deaths:
                self.km = None  # as nbclient's cleanup leaves it
                raise RuntimeError(self.message)

    client = Client(deaths=2)
    _start_kernel(client)
    assert client.started == 3 and client.km is not None
    with pytest.raises(RuntimeError, match="kernel_info"):
        _start_kernel(Client(deaths=3))
    broken = Client(deaths=1, message="No such kernel named python3")
    with pytest.raises(RuntimeError, match="No such kernel"):
        _start_kernel(broken)
    assert broken.started == 1
