"""The tests `make test-platforms` runs and `make test` skips: the course on platforms other than this machine's
CPU, each a few minutes on 2 cores. Every chapter under a simulated T4, Apple GPU and H100 (tests/simulated_chapters.py;
`make test` keeps chapter 00 under each), `make gpu-check` under a simulated T4, the Colab/Kaggle bootstrap in a
fresh torch-only venv, and nbgrader's autograder against `make grade`. CI (.ci/run) runs both commands."""

import os

import pytest

ENV = "COURSE_TEST_PLATFORMS"
only_in_platforms = pytest.mark.skipif(not os.environ.get(ENV),
                                       reason="the course on other platforms: make test-platforms (CI runs it)")
