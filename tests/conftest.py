"""Shared test settings: tests run on the CPU, quick size, never writing reference results."""

import os

os.environ.setdefault("COURSE_SIZE", "quick")
os.environ.setdefault("COURSE_RECORD", "0")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("COURSE_CHECKS_STRICT", "1")  # nbval: a solution that fails its own check fails
# make test runs two workers on two cores, each starting kernels and subprocesses: with torch's default of one
# thread per core in every process they oversubscribe the cores (a chapter took 97 s instead of 27 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")



import threading  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _threads_of_earlier_tests_are_not_the_learners(monkeypatch):
    """The checks refuse an answer while a Python thread the kernel does not own is alive (a learner's thread pool
    could run a reference unseen). In a test worker, threads left by earlier tests or by a library's global pool
    (not the learner's) would fail every later check test in that worker: here a thread alive when the test
    starts is not counted. Threads a test's own "learner" code starts still are (the escape tests rely on it)."""
    from utils.course.checks import core

    before = {t.ident for t in threading.enumerate()}
    original = core.foreign_threads

    def started_in_this_test() -> list[str]:
        earlier = {t.name for t in threading.enumerate() if t.ident in before}
        earlier |= {f"thread {ident}" for ident in before}
        return [name for name in original() if name not in earlier]

    monkeypatch.setattr(core, "foreign_threads", started_in_this_test)
    yield
