"""Every chapter with an H100 (9.0, ~79 GiB) simulated on the CPU: control flow and messages, never figures."""

import pytest
from simulated_chapters import CHAPTERS, check_chapter


@pytest.mark.slow
@pytest.mark.parametrize("notebook", CHAPTERS)
def test_chapter_under_simulated_h100(notebook: str) -> None:
    check_chapter(notebook, "h100")
