"""The chapters that read the compute capability, with an H100 (9.0, ~79 GiB) simulated on the CPU: control flow
and messages, never figures. The other chapters take the same path as under the simulated T4
(see CAPABILITY_CHAPTERS in tests/simulated_chapters.py)."""

import pytest
from simulated_chapters import CAPABILITY_CHAPTERS, check_chapter


@pytest.mark.slow
@pytest.mark.parametrize("notebook", CAPABILITY_CHAPTERS)
def test_chapter_under_simulated_h100(notebook: str) -> None:
    check_chapter(notebook, "h100")
