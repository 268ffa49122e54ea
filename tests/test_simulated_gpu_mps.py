"""Every chapter with an Apple GPU (MPS) simulated on the CPU: control flow and messages, never figures (chapter 00
in `make test`, the others in `make test-platforms`)."""

import pytest
from simulated_chapters import CHAPTERS, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(CHAPTERS))
def test_chapter_under_simulated_mps(notebook: str) -> None:
    check_chapter(notebook, "mps")
