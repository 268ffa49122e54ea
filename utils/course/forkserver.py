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

What a task's own descendants could do to it (review s11, K1 and K2): a process allowed to ptrace the server (same
user without Yama, or root) can take a copy of its socket (`pidfd_getfd`) and queue a forged reply for the next
request. So every request carries a fresh token that the reply must echo, the pidfd a reply carries must name the pid
it claims and that pid must be the server's child, the server makes itself non-dumpable (no ptrace, no pidfd_getfd
by a same-user process without CAP_SYS_PTRACE), and `clean()` tells the caller, between tasks, whether anything is
waiting on the socket that no request asked for. Any of these failing ends the server; the caller falls back. The
server fails closed too: a child whose pidfd cannot be sent is killed before the server exits.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence

REPLY_TIMEOUT_S = 60  # a fork takes milliseconds; a server that has not replied by then is stopped or gone
READY_TIMEOUT_S = 600  # the preload's imports (torch: seconds, minutes on a slow shared filesystem)
_FD_MARK = "@fd"  # an argument "@fd0" is replaced, in the child, by the number of the first descriptor passed


class Child:
    """A task's process, forked by the server: wait for it and kill it through its pidfd."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd

    def wait(self, timeout_s: float) -> bool:
        """True once the child has exited, False if it still runs after `timeout_s` seconds."""
        return _readable(self._pidfd, timeout_s)

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
        self.process, self._sock, self._lock, self.broken = process, sock, threading.Lock(), False

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
            process = subprocess.Popen([sys.executable, "-m", "utils.course.forkserver", str(theirs.fileno()), entry,
                                        *preload], pass_fds=(theirs.fileno(),), env=env, cwd=cwd,
                                       stdin=subprocess.DEVNULL, start_new_session=True)  # Ctrl-C is the caller's
        except OSError:
            mine.close()
            return None
        finally:
            theirs.close()
        server = cls(process, mine)
        ready = server._request({"ready": True}, timeout_s=READY_TIMEOUT_S)  # its own pidfd: pidfd_open works
        if ready is None:  # it died importing, or cannot open pidfds
            server.close()
            return None
        os.close(ready[1])
        return server

    def spawn(self, argv: Sequence[str], *, stdout: int, stderr: int, pass_fds: Sequence[int] = ()) -> Child | None:
        """Fork a child that runs the entry with `argv` ("@fd0", "@fd1"... name `pass_fds` in the child), its stdin
        /dev/null and its stdout and stderr the descriptors given. None if the server has gone."""
        reply = self._request({"argv": list(argv)}, [stdout, stderr, *pass_fds])
        return None if reply is None else Child(*reply)

    def _request(self, message: dict, fds: Sequence[int] = (), timeout_s: float | None = None
                 ) -> tuple[int, int] | None:
        """(pid, pidfd) from the server's reply to `message`, checked; None, and the server ended, otherwise."""
        token = secrets.token_hex(16)
        with self._lock:
            if self.broken or not self._clean():
                return self._broke([])
            try:
                socket.send_fds(self._sock, [json.dumps({**message, "token": token}).encode()], list(fds))
                if not _readable(self._sock.fileno(), REPLY_TIMEOUT_S if timeout_s is None else timeout_s):
                    return self._broke([])  # a stopped or hung server (review s11 K3)
                data, received, _, _ = socket.recv_fds(self._sock, 256, 2)
                for fd in received:
                    os.set_inheritable(fd, False)  # recv_fds does not ask for close-on-exec (K6)
            except OSError:
                return self._broke([])
            try:
                reply = json.loads(data)
                pid = int(reply["pid"])
                expected_parent = None if message.get("ready") else self.process.pid
                if reply["token"] != token or len(received) != 1 or _pidfd_pid(received[0]) != pid \
                        or (expected_parent is None and pid != self.process.pid) \
                        or (expected_parent is not None and _parent_pid(pid) != expected_parent):
                    raise ValueError("a reply the server did not send")
            except (ValueError, TypeError, KeyError, OSError):  # no reply (EOF), or a forged one
                return self._broke(received)
            return pid, received[0]

    def clean(self) -> bool:
        """True while the server runs and nothing waits on its socket that no request asked for (call it between
        tasks: a task's descendants that took a copy of the socket could have queued a reply)."""
        with self._lock:  # not while a request waits for its reply
            return self._clean()

    def _clean(self) -> bool:
        if self.broken or self.process.poll() is not None:
            return False
        try:
            return not self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # b"": the server closed it
        except BlockingIOError:
            return True
        except OSError:
            return False

    def _broke(self, received: list[int]) -> None:
        for fd in received:
            os.close(fd)
        self.broken = True
        self.process.kill()
        return None

    def close(self) -> None:
        """Stop the server (it exits when its socket closes); children still running are not waited for."""
        self._sock.close()
        try:
            self.process.wait(timeout=0 if self.broken else 10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _readable(fd: int, timeout_s: float) -> bool:
    """True once `fd` is readable (a pidfd: its process has exited), False after `timeout_s` (poll: any fd number)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _pidfd_pid(pidfd: int) -> int:
    """The pid a pidfd names, from the kernel's own record of the descriptor (/proc/self/fdinfo)."""
    for line in open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii"):
        if line.startswith("Pid:"):
            return int(line.split()[1])
    raise ValueError(f"descriptor {pidfd} is not a pidfd")


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


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


def not_dumpable() -> None:
    """No ptrace, /proc/<pid>/mem or pidfd_getfd on this process by a same-user process without CAP_SYS_PTRACE (the
    learner's kernel, when it runs as the grader's user; root is not stopped: grade as another user, README)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def _serve(fd: int, entry: str, preload: list[str]) -> None:
    sock = socket.socket(fileno=fd)
    not_dumpable()
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
            pidfd = os.pidfd_open(os.getpid())  # fails here, not at the first task, where pidfds are refused
            socket.send_fds(sock, [json.dumps({"token": message.get("token"), "pid": os.getpid()}).encode()],
                            [pidfd])
            os.close(pidfd)
            continue
        _reap()
        pid = os.fork()
        if pid == 0:
            _child(sock, entry, message["argv"], fds)
        try:
            pidfd = os.pidfd_open(pid)  # before any reaping: the pid names this child until it is collected
            try:
                socket.send_fds(sock, [json.dumps({"token": message.get("token"), "pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except OSError:  # fail closed: a child nobody waits for must not run
            os.kill(pid, signal.SIGKILL)
            return
        finally:
            for received in fds:
                os.close(received)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
    _reap()
