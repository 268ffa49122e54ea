"""Every chapter with an Apple GPU (MPS) simulated on the CPU: control flow and messages, never figures. All in
`make test-platforms`, which CI runs after `make test` (which keeps chapter 00 under the simulated T4)."""

import pytest
from simulated_chapters import CHAPTERS, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(CHAPTERS, in_make_test=False))
def test_chapter_under_simulated_mps(notebook: str) -> None:
    check_chapter(notebook, "mps")
