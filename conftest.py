"""Repository-wide pytest hooks (tests/conftest.py holds the test settings; this file also reaches notebooks/)."""

import functools

import nbval.kernel
import pytest

from utils.kernels import started_again

# nbval's kernels are started again when one dies before its first reply (a port race: utils.kernels.started_again)
_START_NEW_KERNEL = nbval.kernel.start_new_kernel
nbval.kernel.start_new_kernel = functools.wraps(_START_NEW_KERNEL)(
    lambda *args, **kwargs: started_again(lambda: _START_NEW_KERNEL(*args, **kwargs)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A chapter cell run by nbval fails when it writes to stderr: library noise, warnings and progress bars on
    stderr look like a broken install to a learner (utils.quiet drops the known noise; tqdm writes to stdout)."""
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


# The test files that take minutes, longest first (measured: `make test` prints the 30 slowest tests). With
# `--dist loadfile` each file runs on one worker, and a long file that starts late sets the suite's wall time, so
# these start first, then the chapters (nbval), then the short unit tests, which fill the workers' last minutes.
LONG_FILES = ("test_grade.py", "test_simulated_gpu_t4.py", "test_hosted.py", "test_grading_escapes.py",
              "test_browser.py", "test_simulated_gpu_t4_quick.py", "test_nbgrader.py", "test_grading_tamper.py",
              "test_simulated_gpu_mps.py", "test_simulated_gpu_h100.py", "test_lab_flow_browser.py", "test_book.py",
              "test_real_steps.py")


def pytest_collection_modifyitems(session, config, items):
    """Long files first, then notebooks, then the rest, each group in its collected order (a stable sort, the same
    on every xdist worker); the Makefile turns off xdist's own reordering by test count (--no-loadscope-reorder)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item) -> tuple[int, int]:
        name = item.path.name
        return (0, rank[name]) if name in rank else (1, 0) if name.endswith(".ipynb") else (2, 0)

    items.sort(key=key)
