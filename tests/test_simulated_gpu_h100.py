"""The chapters that read the compute capability, with an H100 (9.0, ~79 GiB) simulated on the CPU: control flow
and messages, never figures. The other chapters take the same path as under the simulated T4
(see CAPABILITY_CHAPTERS in tests/simulated_chapters.py). All in `make test-platforms`, which CI runs: `make test`
keeps chapter 00 under the simulated T4, and this path differs from the T4's only where the capability
is read."""

import pytest
from simulated_chapters import CAPABILITY_CHAPTERS, check_chapter, device_params


@pytest.mark.slow
@pytest.mark.parametrize("notebook", device_params(CAPABILITY_CHAPTERS, in_make_test=False))
def test_chapter_under_simulated_h100(notebook: str) -> None:
    check_chapter(notebook, "h100")
