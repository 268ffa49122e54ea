"""The tests `make test-platforms` runs and `make test` skips: the course on platforms other than this machine's
CPU, about 7 minutes of pytest on 2 cores in all: every chapter under a simulated T4 and Apple GPU, the six that read
the compute capability under a simulated H100 (tests/simulated_chapters.py; `make test` keeps chapter 00 under the
T4), `make gpu-check` under a simulated T4, the Colab/Kaggle bootstrap in a fresh torch-only venv,
nbgrader's autograder against `make grade`, and a learner's JupyterLab session in Chromium (tests/test_browser.py).
CI (.ci/run) runs both commands."""

import os

import pytest

ENV = "COURSE_TEST_PLATFORMS"
only_in_platforms = pytest.mark.skipif(not os.environ.get(ENV),
                                       reason="in make test-platforms (simulated GPUs, hosted bootstrap, nbgrader, "
                                              "the JupyterLab session; CI runs it)")
