"""Every chapter at QUICK size, figure assertions on, under a simulated A10G (8.6, ~22 GiB), H100 (9.0, ~79 GiB) and
Apple GPU (MPS): the issue-33 run (the T4's is tests/test_simulated_gpu_t4*.py, part of `make test`).

About 5 minutes a device on 2 cores, so opt-in: COURSE_SIM_QUICK_ALL=1 (make test keeps its 15-minute budget with
the T4 at quick size and the H100 and MPS at tiny size). Each run also checks the state a chapter leaves in force
(the memory fraction, the allocator variables: tests/simulated_gpu.py, end_state)."""

import os

import pytest
from simulated_chapters import CHAPTERS, check_chapter

pytestmark = pytest.mark.skipif(not os.environ.get("COURSE_SIM_QUICK_ALL"),
                                reason="opt-in: COURSE_SIM_QUICK_ALL=1 (about 15 minutes on 2 cores)")


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["a10g", "h100", "mps"])
@pytest.mark.parametrize("notebook", CHAPTERS)
def test_chapter_at_quick_size(notebook: str, profile: str) -> None:
    check_chapter(notebook, profile, size="quick")
