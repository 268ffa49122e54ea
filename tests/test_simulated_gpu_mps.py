"""Every chapter with an Apple GPU (MPS) simulated on the CPU: control flow and messages, never figures."""

import pytest
from simulated_chapters import CHAPTERS, check_chapter


@pytest.mark.slow
@pytest.mark.parametrize("notebook", CHAPTERS)
def test_chapter_under_simulated_mps(notebook: str) -> None:
    check_chapter(notebook, "mps")
