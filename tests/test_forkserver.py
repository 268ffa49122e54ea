"""utils/course/forkserver.py: children forked from a server that imported the preload, their descriptors, waiting and
killing through pidfds, and the server's end (tests/forkserver_tasks.py holds the tasks)."""

import os
import time
from pathlib import Path

import pytest

from utils.course.forkserver import ForkServer

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


def test_a_server_where_pidfds_fail_is_refused_at_start(tmp_path):
    """Review s11 K2: where pidfd_open raises at run time (an old kernel, a seccomp profile), the server fails its
    start-up handshake instead of the first task (which then ran twice, on one result pipe)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os\n\ndef _refused(*a, **k):\n    raise OSError(38, 'refused')\n\nos.pidfd_open = _refused\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    assert ForkServer.start("tests.forkserver_tasks:report", [], env=env, cwd=str(ROOT)) is None


def _played_server(tmp_path):
    """A ForkServer whose 'server' is this test, answering by hand on the other end of its socket."""
    import socket
    import subprocess
    import sys

    mine, theirs = socket.socketpair()
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    return ForkServer(stand_in, mine), theirs, stand_in


@pytest.mark.parametrize("forgery", ["queued before the request", "wrong token", "pidfd of another process"])
def test_a_forged_reply_ends_the_server_instead_of_being_believed(tmp_path, forgery):
    """Review s11 K1: a process that took a copy of the server's socket could queue a reply naming any pid and pidfd.
    A reply must echo the request's token, its pidfd must name the pid it claims, and that pid must be the server's
    child; anything queued between tasks makes clean() false."""
    import json
    import socket
    import threading

    server, theirs, stand_in = _played_server(tmp_path)
    try:
        other = os.pidfd_open(os.getpid())  # a process that is not the server's child: this test's own
        if forgery == "queued before the request":
            socket.send_fds(theirs, [json.dumps({"token": "x", "pid": os.getpid()}).encode()], [other])
            assert not server.clean()
        else:
            def answer():
                data, fds, _, _ = socket.recv_fds(theirs, 1 << 16, 8)
                token = json.loads(data)["token"]
                pid = os.getpid() if forgery == "pidfd of another process" else stand_in.pid
                fake = other if forgery == "pidfd of another process" else os.pidfd_open(stand_in.pid)
                socket.send_fds(theirs, [json.dumps({"token": token if forgery != "wrong token" else "0" * 32,
                                                     "pid": pid}).encode()], [fake])
                for fd in fds:
                    os.close(fd)
            helper = threading.Thread(target=answer)
            helper.start()
        r, w = os.pipe()
        assert server.spawn(["x"], stdout=w, stderr=w) is None
        assert server.broken and not server.clean()
        os.close(r)
        os.close(w)
        os.close(other)
    finally:
        stand_in.kill()
        stand_in.wait()
        theirs.close()
        server.close()


def test_a_stopped_server_is_given_up_after_the_reply_timeout(monkeypatch):
    """Review s11 K3: a task's kernel can SIGSTOP the server (same user, no ptrace needed); a request then waits at most
    REPLY_TIMEOUT_S, and the server is ended, instead of hanging the whole grading run."""
    import signal

    from utils.course import forkserver

    monkeypatch.setattr(forkserver, "REPLY_TIMEOUT_S", 2)
    server = ForkServer.start("tests.forkserver_tasks:sleep", [], cwd=str(ROOT))
    try:
        os.kill(server.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        child, out_r, err_r = _spawn(server, ["0"], passed=False)
        assert child is None and server.broken and time.monotonic() - started < 30
        os.close(out_r)
        os.close(err_r)
    finally:
        server.close()
