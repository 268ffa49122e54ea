"""Repository-wide pytest hooks (tests/conftest.py holds the test settings; this file also reaches notebooks/)."""

import functools
import os
import shutil
import tempfile

import nbval.kernel
import pytest

from tests.kernel_zygote import ENV as ZYGOTE_ENV
from tests.kernel_zygote import start_for_session
from utils.course.kernels import started_again

# nbval's kernels are started again when one dies before its first reply (a port race:
# utils.course.kernels.started_again), and with the session's kernel zygote where it runs: --nbval-current-env's kernel
# is this interpreter's ipykernel, which the "python3" kernel spec that pytest_collection_finish writes starts as a fork
# (same interpreter)
_START_NEW_KERNEL = nbval.kernel.start_new_kernel


@functools.wraps(_START_NEW_KERNEL)
def _start_new_kernel(*args, **kwargs):
    if kwargs.get("kernel_name") == nbval.kernel.CURRENT_ENV_KERNEL_NAME and os.environ.get(ZYGOTE_ENV, "0") != "0":
        kwargs["kernel_name"] = "python3"
    return started_again(lambda: _START_NEW_KERNEL(*args, **kwargs))


nbval.kernel.start_new_kernel = _start_new_kernel


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A chapter cell run by nbval fails when it writes to stderr: library noise, warnings and progress bars on
    stderr look like a broken install to a learner (utils.lessons.quiet drops the known noise; tqdm writes to
    stdout)."""
    outcome = yield
    report = outcome.get_result()
    outputs = getattr(item, "test_outputs", None)
    if call.when != "call" or not report.passed or not outputs or "notebooks" not in str(item.fspath):
        return
    noise = [str(o.get("text", "")).strip()[:300] for o in outputs
             if o.get("output_type") == "stream" and o.get("name") == "stderr" and str(o.get("text", "")).strip()]
    if noise:
        report.outcome = "failed"
        report.longrepr = f"{item.name} wrote to stderr (a learner sees this as an error):\n" + "\n".join(noise)


# The test files (and chapters) that take 20 s or more, longest first (measured with `pytest --durations=0`, summed
# per file; the platform files for `make test-platforms`). With `--dist loadfile` each file runs on one worker, and a
# long file that starts late sets the suite's wall time (the workers then finish apart), so these start first, longest
# first, then the other chapters (nbval), then the short unit tests, which fill the workers' last minutes.
LONG_FILES = ("test_grade.py", "test_simulated_gpu_t4.py", "test_hosted.py", "test_grading_escapes.py",
              "test_browser.py", "test_simulated_gpu_t4_quick.py", "test_nbgrader.py", "test_grading_tamper.py",
              "test_simulated_gpu_mps.py", "test_simulated_gpu_h100.py", "test_real_steps.py",
              "test_lab_flow_browser.py", "test_book.py", "test_estimate.py", "test_distributed.py",
              "05_gradient_checkpointing.ipynb", "test_sim_gpu_behaviour.py", "test_bad_input.py", "test_gpu_check.py",
              "test_grading_tripwire.py", "test_architectures.py", "06_gradient_accumulation.ipynb",
              "test_estimate_fast.py", "test_check_gaming.py", "test_grading_replay.py", "test_formats.py")


def pytest_collection_modifyitems(session, config, items):
    """Long files first, then notebooks, then the rest, each group in its collected order (a stable sort, the same
    on every xdist worker); the Makefile turns off xdist's own reordering by test count (--no-loadscope-reorder)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item) -> tuple[int, int]:
        name = item.path.name
        return (0, rank[name]) if name in rank else (1, 0) if name.endswith(".ipynb") else (2, 0)

    items.sort(key=key)


_ZYGOTE = pytest.StashKey[tuple]()  # the session's kernel server and its folder


def pytest_collection_finish(session):
    """Each process that runs tests (an xdist worker, or pytest alone) starts its kernels as forks of a server that
    has imported torch (tests/kernel_zygote.py; COURSE_KERNEL_ZYGOTE=0 turns it off), once the test settings of
    tests/conftest.py are in the environment, which the server's must match."""
    config = session.config
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no test
    folder = tempfile.mkdtemp(prefix="course-zygote-")
    started = start_for_session(folder)
    if started is None:
        shutil.rmtree(folder)
        return
    server, env = started
    os.environ.update(env)
    config.stash[_ZYGOTE] = (server, folder)


def pytest_unconfigure(config):
    server, folder = config.stash.get(_ZYGOTE, (None, None))
    if server is not None:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
