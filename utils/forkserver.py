"""A fork server: one process imports what every task needs once, then forks a fresh child per task.

Why: `make grade` grades each submission in a process of its own, and each such process used to import torch, the
checks and nbclient again (about 3 CPU-s each, the largest part of grading a short lab). A child forked from a
process that has imported them starts with them in memory.

Why a server rather than a fork of the caller: the caller may run threads (the grader's pool of `--jobs`), and a
fork of a threaded process can inherit a lock another thread held. The server is started with exec, stays
single-threaded and never runs a task itself, so every child starts from the same clean state. It is reached only
through a socket that only its parent holds, and children close their copy before the task runs.

Linux only: the parent waits for and kills children that are not its own through pidfds (`os.pidfd_open`);
`ForkServer.start` returns None elsewhere, or when the server cannot start, and callers then start a process per
task as before.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence

_FD_MARK = "@fd"  # an argument "@fd0" is replaced, in the child, by the number of the first descriptor passed


class Child:
    """A task's process, forked by the server: wait for it and kill it through its pidfd."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd

    def wait(self, timeout_s: float) -> bool:
        """True once the child has exited, False if it still runs after `timeout_s` seconds."""
        return bool(select.select([self._pidfd], [], [], timeout_s)[0])

    def kill(self) -> None:
        """SIGKILL the child (a child that has already exited is left alone: the pidfd names only this process)."""
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        os.close(self._pidfd)


class ForkServer:
    """The parent's handle on the server process (`start`), which forks a child per `spawn`."""

    def __init__(self, process: subprocess.Popen, sock: socket.socket) -> None:
        self.process, self._sock, self._lock = process, sock, threading.Lock()

    @classmethod
    def start(cls, entry: str, preload: Sequence[str], *, env: dict[str, str] | None = None,
              cwd: str | None = None) -> ForkServer | None:
        """A server that imports `preload`, then runs `entry` ("module:function", called with one list of
        arguments, returning an exit code) in a forked child per `spawn`. None where pidfds are missing."""
        if not isinstance(entry, str) or entry.count(":") != 1:
            raise ValueError(f"entry must be 'module:function', got {entry!r}")
        if isinstance(preload, str) or not all(isinstance(name, str) for name in preload):
            raise TypeError(f"preload must be a sequence of module names, got {preload!r}")
        if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds") and hasattr(signal, "pidfd_send_signal")):
            return None
        mine, theirs = socket.socketpair()
        try:
            process = subprocess.Popen([sys.executable, "-m", "utils.forkserver", str(theirs.fileno()), entry,
                                        *preload], pass_fds=(theirs.fileno(),), env=env, cwd=cwd,
                                       stdin=subprocess.DEVNULL)
        except OSError:
            mine.close()
            return None
        finally:
            theirs.close()
        server = cls(process, mine)
        if server._request({"ready": True}) is None:  # it died importing, or cannot fork
            server.close()
            return None
        return server

    def spawn(self, argv: Sequence[str], *, stdout: int, stderr: int, pass_fds: Sequence[int] = ()) -> Child | None:
        """Fork a child that runs the entry with `argv` ("@fd0", "@fd1"... name `pass_fds` in the child), its stdin
        /dev/null and its stdout and stderr the descriptors given. None if the server has gone."""
        reply = self._request({"argv": list(argv)}, [stdout, stderr, *pass_fds])
        return None if reply is None else Child(*reply)

    def _request(self, message: dict, fds: Sequence[int] = ()) -> tuple[int, int] | None:
        with self._lock:
            try:
                socket.send_fds(self._sock, [json.dumps(message).encode()], list(fds))
                data, received, _, _ = socket.recv_fds(self._sock, 64, 1)
            except OSError:
                return None
        if not data:
            return None
        pid = int(data)
        if not received:
            return (pid, -1) if message.get("ready") else None
        return pid, received[0]

    def close(self) -> None:
        """Stop the server (it exits when its socket closes); children still running are not waited for."""
        self._sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _child(sock: socket.socket, entry: str, argv: list[str], fds: list[int]) -> None:
    """In the forked child: the descriptors in place, then the task; never returns."""
    code = 1
    try:
        sock.close()
        stdout, stderr, *passed = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        for fd in passed:
            os.set_inheritable(fd, False)
        argv = [str(passed[int(a[len(_FD_MARK):])]) if a.startswith(_FD_MARK) else a for a in argv]
        module, function = entry.split(":")
        result = getattr(importlib.import_module(module), function)(argv)
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child's last words go to its stderr, then it exits
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _reap() -> None:
    """Collect the children that have exited (each keeps only a process-table entry until then)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve(fd: int, entry: str, preload: list[str]) -> None:
    sock = socket.socket(fileno=fd)
    for name in preload:
        importlib.import_module(name)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 16)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        if message.get("ready"):
            sock.sendall(str(os.getpid()).encode())
            continue
        _reap()
        pid = os.fork()
        if pid == 0:
            _child(sock, entry, message["argv"], fds)
        pidfd = os.pidfd_open(pid)  # before any reaping: the pid names this child until it is collected
        for received in fds:
            os.close(received)
        socket.send_fds(sock, [str(pid).encode()], [pidfd])
        os.close(pidfd)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
    _reap()
