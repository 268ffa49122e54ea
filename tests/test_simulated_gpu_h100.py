"""The chapters that read the compute capability, with an H100 (9.0, ~79 GiB) simulated on the CPU: control flow
and messages, never figures. The other chapters take the same path as under the simulated T4
(see CAPABILITY_CHAPTERS in tests/simulated_chapters.py). Chapter 00 in `make test`, the others in
`make test-platforms`."""

import pytest
from simulated_chapters import CAPABILITY_CHAPTERS, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(CAPABILITY_CHAPTERS))
def test_chapter_under_simulated_h100(notebook: str) -> None:
    check_chapter(notebook, "h100")
