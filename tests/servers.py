"""Helpers for tests that start a server: a free port, a server started on one and answering, and stopping a
process group for good."""

import http.client
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from utils.lessons.distributed import free_port  # noqa: F401  (re-exported for the server tests)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group started with start_new_session=True; SIGKILL it if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def started(command: Callable[[int], list[str]], ready: str, log_path: Path, env: dict | None = None,
            attempts: int = 3, wait_s: float = 90) -> tuple[subprocess.Popen, int]:
    """(the process, its port): `command(port)` started in a process group of its own, its output appended to
    `log_path`, once http://127.0.0.1:port + `ready` answers. A free port can be taken between picking it and the
    server binding it (a Jupyter kernel's ZMQ socket, started by the other test worker, answered a fixture's probe
    with its greeting: BadStatusLine in a fresh run of review s15): then the server starts again on another port.
    Raises RuntimeError with the log's tail when it never answers."""
    for _ in range(attempts):
        port = free_port()
        with open(log_path, "a") as log:
            proc = subprocess.Popen(command(port), env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{ready}", timeout=3)
                return proc, port
            except http.client.HTTPException:  # another program answers on that port
                break
            except OSError:
                time.sleep(0.5)
        if proc.poll() is None:  # one that exited (its port in use) has been reaped by poll()
            stop_group(proc)
    raise RuntimeError(f"the server did not start: {Path(log_path).read_text()[-2000:]}")
