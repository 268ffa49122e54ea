"""utils/forkserver.py: children forked from a server that imported the preload, their descriptors, waiting and
killing through pidfds, and the server's end (tests/forkserver_tasks.py holds the tasks)."""

import os
import time
from pathlib import Path

import pytest

from utils.forkserver import ForkServer

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs pidfds (Linux)")


def _read(fd: int) -> str:
    with os.fdopen(fd, "rb") as stream:
        return stream.read().decode()


def _spawn(server: ForkServer, entry_argv: list[str], passed: bool = True):
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = server.spawn(["@fd0", *entry_argv] if passed else entry_argv, stdout=err_w, stderr=err_w,
                             pass_fds=(out_w,) if passed else ())
    finally:
        os.close(out_w)
        os.close(err_w)
    return child, out_r, err_r


def test_a_child_starts_with_the_preload_imported_and_gets_its_descriptors():
    server = ForkServer.start("tests.forkserver_tasks:report", ["colorsys", "tests.forkserver_tasks"], cwd=str(ROOT))
    assert server is not None
    try:
        for _ in range(2):  # each child is a fresh fork of the same server
            child, out_r, err_r = _spawn(server, ["colorsys", "wave"])
            assert child is not None and child.pid != server.process.pid
            assert child.wait(60)
            assert _read(out_r) == "colorsys"  # preloaded; "wave" was never imported
            assert _read(err_r) == "the child's stderr\n"
            child.close()
    finally:
        server.close()
    assert server.process.returncode == 0  # it exits once its socket closes


def test_a_child_that_outlives_its_time_is_killed_and_a_failing_one_says_why():
    server = ForkServer.start("tests.forkserver_tasks:sleep", [], cwd=str(ROOT))
    try:
        child, out_r, err_r = _spawn(server, ["600"], passed=False)
        started = time.monotonic()
        assert not child.wait(0.5)
        child.kill()
        assert child.wait(30) and time.monotonic() - started < 30
        child.kill()  # a second kill of a process that has exited is harmless
        child.close()
        os.close(out_r)
        os.close(err_r)
    finally:
        server.close()
    crashing = ForkServer.start("tests.forkserver_tasks:crash", [], cwd=str(ROOT))
    try:
        child, out_r, err_r = _spawn(crashing, [], passed=False)
        assert child.wait(60)
        assert "RuntimeError: a task that fails" in _read(err_r)
        os.close(out_r)
    finally:
        crashing.close()


def test_a_server_that_cannot_import_its_preload_is_none_and_bad_arguments_are_named():
    assert ForkServer.start("tests.forkserver_tasks:report", ["no_such_module_here"], cwd=str(ROOT)) is None
    with pytest.raises(ValueError, match="entry"):
        ForkServer.start("tests.forkserver_tasks.report", [])
    with pytest.raises(TypeError, match="preload"):
        ForkServer.start("tests.forkserver_tasks:report", "torch")
