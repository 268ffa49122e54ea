"""Chapters 07-10 with a T4 simulated on the CPU at QUICK size, every figure assertion on (the other half of
tests/test_simulated_gpu_t4.py, in its own file so that pytest-xdist runs the halves side by side; in
`make test-platforms`).

A chapter that fails here because of a notebook bug carries an xfail naming the finding (QUICK_KNOWN_FAILURES in
tests/simulated_chapters.py); the coordinator fixes the notebook and removes it."""

import pytest
from simulated_chapters import T4_SECOND, T4_SIZE, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(T4_SECOND))
def test_chapter_at_quick_size_under_simulated_t4(notebook: str) -> None:
    check_chapter(notebook, "t4", size=T4_SIZE)
