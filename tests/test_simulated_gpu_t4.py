"""Every chapter with a T4 (compute capability 7.5, ~15 GiB) simulated on the CPU: control flow and messages,
never figures."""

import pytest
from simulated_chapters import CHAPTERS, check_chapter


@pytest.mark.slow
@pytest.mark.parametrize("notebook", CHAPTERS)
def test_chapter_under_simulated_t4(notebook: str) -> None:
    check_chapter(notebook, "t4")
