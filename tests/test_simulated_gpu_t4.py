"""Chapters 00-06 with a T4 (compute capability 7.5, ~15 GiB) simulated on the CPU at QUICK size (chapter 00 in
`make test`, the others in `make test-platforms`: tests/simulated_chapters.py, device_params): every figure
assertion on, memory from the caching allocator model, events that complete only when synchronised, child processes
under the same simulated T4 (chapters 07-10: tests/test_simulated_gpu_t4_quick.py; the choice and its time: T4_SIZE
in tests/simulated_chapters.py)."""

import pytest
from simulated_chapters import T4_FIRST, T4_SIZE, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(T4_FIRST))
def test_chapter_under_simulated_t4(notebook: str) -> None:
    check_chapter(notebook, "t4", size=T4_SIZE)
