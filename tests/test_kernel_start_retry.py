"""Kernels that die before their first reply (a TCP port taken by another process between jupyter_client's pick
and the kernel's bind) are started again: utils.course.kernels.started_again, used by the grader
(utils.course.grade._start_kernel) and by the suite's nbval kernels (the root conftest)."""

import nbval.kernel
import pytest

from utils.course.kernels import DIED_AT_BIRTH, started_again

DEATH = f"Kernel died {DIED_AT_BIRTH}"


def test_a_kernel_that_dies_before_its_first_reply_is_started_again():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(DEATH)
        return "km", "kc"

    assert started_again(flaky) == ("km", "kc") and len(calls) == 3


def test_other_failures_and_the_last_death_are_raised():
    def broken():
        raise RuntimeError("no such kernel")

    with pytest.raises(RuntimeError, match="no such kernel"):
        started_again(broken)
    deaths = []

    def dies():
        deaths.append(1)
        raise RuntimeError(DEATH)

    with pytest.raises(RuntimeError, match="kernel_info"):
        started_again(dies, attempts=3)
    assert len(deaths) == 3


def test_the_suites_nbval_kernels_go_through_it():
    started = nbval.kernel.start_new_kernel
    assert started.__wrapped__.__module__ == "nbval.kernel" and started is not started.__wrapped__


def test_a_grading_kernel_that_dies_at_birth_is_started_again():
    from utils.course.grade import _start_kernel

    class Client:
        def __init__(self, deaths: int, message: str = DEATH) -> None:
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
