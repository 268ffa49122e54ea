"""Kernels for the test suite forked from a process that has already imported torch (Linux only).

Why: `make test` starts about 90 Jupyter kernels (nbval's chapters, chapter 00 under each simulated GPU, every graded
submission, the browser sessions), and a fresh kernel spends about 2 CPU-seconds importing torch, numpy and
ipykernel before its first cell, on 2 cores shared by two pytest workers. Here one server per pytest worker
(`serve`) imports them once, and each kernel the suite starts is a fork of it (about 0.3 CPU-seconds). Learners,
`make grade` and `make outputs` outside the tests start their kernels as usual: only the test session points the
kernel name "python3" at this file (conftest.py, `start_for_session`), and `COURSE_KERNEL_ZYGOTE=0` turns it off.

What a forked kernel shares with a fresh one (tests/test_kernel_zygote.py compares them): the program and its
arguments, the environment, the working directory, sys.path, the warning filters its PYTHONWARNINGS gives, its
standard streams (passed over the socket), the signals its client ignores, its umask and resource limits, fresh
random seeds and multiprocessing key, a session and process group of its own (so an interrupt reaches what the
kernel runs, as jupyter_client's signal to a fresh kernel's group does), and an exit status by the same signal.
Each kernel runs under a small leader process, the reaper of the kernel's orphans, which forwards the signals
jupyter_client sends the client (interrupt, terminate), ends the kernel when the client is killed, and kills
whatever the kernel left running when it ends. What differs: the string hash seed (shared by the forks), and
torch's and numpy's import-time messages, printed once in the server's log; a server whose imports printed
anything serves no kernel, so such a message still reaches the chapters' cells (and conftest.py's check of stderr).
The grader's own handling of what a submission leaves running is tested with ordinary kernels
(tests/test_grading_tamper.py). A request whose environment differs where the interpreter or an imported library
read it at start (LD_*, OMP_*, PYTHON*, TORCH*, LANG, ...) is refused, and the client starts an ordinary kernel
instead; so does a client that finds no server.

`python kernel_zygote.py serve SOCKET` runs the server; the kernel spec runs
`python -S kernel_zygote.py client -f CONNECTION_FILE [ipykernel arguments]`, the process jupyter_client
watches, signals and kills.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import sys

ENV = "COURSE_KERNEL_ZYGOTE"  # the server's socket path (set by conftest.py); "0" turns the zygote off
LOG_ENV = "COURSE_KERNEL_ZYGOTE_LOG"  # where the server writes what it refused and why (default: its folder)
# Environment read when the interpreter starts or when the preloaded libraries are imported: a request must match
# the server's here (PYTHONWARNINGS is applied to the fork instead)
STARTUP_ENV = re.compile(r"^(LD_|OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|NPY_|TORCH|PYTORCH_|CUDA|NVIDIA_|MALLOC_|PYTHON|"
                         r"PYZMQ_|ZMQ_|IPYTHON_|TRAITLETS_|TORNADO_|JUPYTER_ALLOW|COVERAGE_|LANG$|LANGUAGE$|LC_|TZ$|"
                         r"USER$)")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def startup_env(env: dict[str, str]) -> dict[str, str]:
    """The part of `env` a kernel's interpreter and preloaded libraries read before its first cell."""
    return {k: v for k, v in env.items() if STARTUP_ENV.match(k) and k != "PYTHONWARNINGS"}


# ----------------------------------------------------------------------------------------------- the client


def client(args: list[str]) -> None:
    """Ask the server for a kernel and stand in for it until it ends (exit status, signals); with no server, or a
    refusal, become an ordinary kernel."""
    import resource

    path = os.environ.get(ENV, "")
    conn = None
    if path and path != "0":
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            conn.connect(path)
            limits = [[n, *resource.getrlimit(n)] for n in
                      (getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))]
            request = {"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "umask": _umask(),
                       "limits": limits,
                       "ignored": [int(s) for s in signal.Signals if signal.getsignal(s) == signal.SIG_IGN]}
            socket.send_fds(conn, [json.dumps(request).encode()], _stdio())
            if conn.recv(64) != b"ok":
                conn.close()
                conn = None
        except OSError:
            conn = None
    if conn is None:  # an ordinary kernel, exactly as the standard kernel spec starts it
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *args])

    def forward(signum: int, frame: object) -> None:
        try:
            conn.send(b"S%d" % signum)
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    parent = os.getppid()
    while True:
        if not select.select([conn], [], [], 1.0)[0]:
            if os.getppid() != parent:  # whoever started the kernel is gone: so is the kernel (the leader sees EOF)
                os._exit(1)
            continue
        message = conn.recv(64)
        if not message:  # the leader is gone without a word
            os._exit(1)
        if message.startswith(b"X"):
            code = int(message[1:])
            if code < 0:  # killed by a signal: end the same way, so that the exit status reads the same
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code if code >= 0 else 1)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _stdio() -> list[int]:
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


# ----------------------------------------------------------------------------------------------- the server


def serve(path: str) -> None:
    """Import what every kernel imports, then fork a leader and its kernel for each request on `path`."""
    import warnings

    startup = warnings.filters[:]
    warnings.filters[:] = []
    warnings._processoptions(sys.warnoptions)  # type: ignore[attr-defined]
    options = warnings.filters[:]  # what this interpreter's -W and PYTHONWARNINGS put there
    warnings.filters[:] = startup
    filters = (startup, options)
    sys.path.pop(0)  # this file's folder: a kernel's sys.path starts as ipykernel_launcher leaves it

    logged = os.fstat(2).st_size
    import numpy  # noqa: F401
    import torch  # noqa: F401
    from ipykernel import ipkernel, kernelapp, zmqshell  # noqa: F401

    sys.stderr.flush()
    if os.fstat(2).st_size != logged:  # an import printed something: a fresh kernel would show it in a cell
        print("the imports above printed to stderr: serving no kernel, so that every kernel shows it",
              file=sys.stderr, flush=True)
        return
    own_env = startup_env(dict(os.environ))
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # clients see the socket only once it accepts
    while os.getppid() == parent:  # the pytest worker that started it is alive
        _reap()  # leaders that ended (their CPU, and their kernel's, counts in this process's children's)
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        try:
            payload, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            request = json.loads(payload)
        except (OSError, ValueError):
            conn.close()
            continue
        differs = sorted(set(startup_env(request["env"]).items()) ^ set(own_env.items()))
        if differs or len(fds) != 3:
            print(f"refused (started fresh): environment differs in {sorted({k for k, _ in differs})}",
                  file=sys.stderr, flush=True)
            conn.send(b"no")
        elif os.fork() == 0:
            listener.close()
            _lead(conn, fds, request, filters)  # never returns
        else:
            print(f"forked a kernel for {' '.join(request['args'][:2])}", file=sys.stderr, flush=True)
            conn.send(b"ok")
        conn.close()
        for fd in fds:
            os.close(fd)
    listener.close()


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _lead(conn: socket.socket, fds: list[int], request: dict, filters: tuple[list, list]) -> None:
    """The leader: reaper of the kernel's process tree, forwarding signals, reporting the kernel's exit."""
    import ctypes
    import resource

    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    for name, soft, hard in request["limits"]:
        try:
            resource.setrlimit(name, (soft, hard))
        except (ValueError, OSError) as exc:
            print(f"leader: resource limit {name} not set ({exc})", file=sys.stderr, flush=True)
    os.umask(request["umask"])
    kernel = os.fork()
    if kernel == 0:
        conn.close()
        _become_kernel(fds, request, filters)
    for fd in fds:
        os.close(fd)
    watch = os.pidfd_open(kernel)
    code = 1
    while True:
        ready = select.select([watch, conn], [], [], 1.0)[0]
        if conn in ready:
            message = conn.recv(64)
            if not message:  # the client was killed: so is the kernel
                _kill_tree()
                os._exit(0)
            if message.startswith(b"S"):
                try:
                    os.killpg(kernel, int(message[1:]))  # the kernel's group, as jupyter_client signals a fresh one
                except ProcessLookupError:
                    pass
        if watch in ready:
            code = os.waitstatus_to_exitcode(os.waitpid(kernel, 0)[1])
            break
        for pid in _children(os.getpid()):  # orphans adopted here that ended: no zombies until the kernel ends
            if pid != kernel:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
    _kill_tree()
    try:
        conn.send(b"X%d" % code)
    except OSError:
        pass
    os._exit(0)


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        pass
    return found


def _kill_tree() -> None:
    """Kill every process below this one (the kernel's leftovers, adopted here) and reap them."""
    for _ in range(50):
        tree, todo = [], _children(os.getpid())
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += _children(pid)
        if not tree:
            return
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                if os.waitpid(-1, 0)[0] == 0:
                    break
            except ChildProcessError:
                break


def _become_kernel(fds: list[int], request: dict, filters: tuple[list, list]) -> None:  # never returns
    """Turn this fork into what `python -m ipykernel_launcher ARGS` would be with the client's environment."""
    import multiprocessing
    import random
    import warnings

    import numpy

    os.setsid()  # a session and process group of its own, as jupyter_client starts a fresh kernel
    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    for sig in FORWARDED:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    for sig in request["ignored"]:
        signal.signal(sig, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update({k: v for k, v in request["env"].items() if k != ENV})  # no way back to the server
    os.chdir(request["cwd"])
    # warning filters as a fresh interpreter orders them: the imports' (inserted in front), then the options',
    # then the defaults; the server's options give way to the client's PYTHONWARNINGS
    startup, options = filters
    added = [f for f in warnings.filters if f not in startup]
    sys.warnoptions[:] = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    warnings.filters[:] = []
    warnings._processoptions(sys.warnoptions)  # type: ignore[attr-defined]
    warnings.filters[:] = added + warnings.filters + [f for f in startup if f not in options]
    warnings._filters_mutated()  # type: ignore[attr-defined]
    random.seed()
    numpy.random.seed()
    multiprocessing.current_process().authkey = os.urandom(32)
    import ipykernel_launcher

    sys.argv = [ipykernel_launcher.__file__, *request["args"]]
    from ipykernel import kernelapp

    # the two settings whose defaults ipykernel reads from the environment when it is imported
    kernelapp.IPKernelApp.launch_instance(parent_handle=int(os.environ.get("JPY_PARENT_PID") or 0),
                                          interrupt=int(os.environ.get("JPY_INTERRUPT_EVENT") or 0))
    sys.exit(0)  # up through the server's frames to the interpreter's own exit (atexit runs, as in a fresh kernel)


# ------------------------------------------------------------------------------------------------ pytest side


def start_for_session(folder: str) -> tuple[object, dict[str, str]] | None:
    """Start a server in `folder` (a temporary directory) and write the kernel spec that uses it; returns the server
    process and the environment to set (JUPYTER_PATH first, the socket), or None where it cannot run here."""
    import shutil
    import subprocess

    if os.environ.get(ENV) == "0" or not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return None
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict

    spec = get_kernel_dict()  # ipykernel's own spec of this interpreter (what --nbval-current-env starts)
    spec_dir = os.path.join(folder, "kernels", "python3")
    os.makedirs(spec_dir)
    for name in os.listdir(RESOURCES):  # the logos
        shutil.copy(os.path.join(RESOURCES, name), spec_dir)
    assert spec["argv"][1:3] == ["-m", "ipykernel_launcher"], spec["argv"]
    spec["argv"] = [spec["argv"][0], "-S", os.path.abspath(__file__), "client", *spec["argv"][3:]]
    with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
        json.dump(spec, f, indent=1)
    sock = os.path.join(folder, "zygote.sock")
    log = open(os.environ.get(LOG_ENV) or os.path.join(folder, "zygote.log"), "a")  # noqa: SIM115 - its stderr
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", sock], stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    log.close()
    paths = [folder, *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
    return server, {"JUPYTER_PATH": os.pathsep.join(paths), ENV: sock}


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[2:])
