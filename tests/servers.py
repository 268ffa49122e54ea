"""Helpers for tests that start a server: a free port, and stopping a process group for good."""

import os
import signal
import subprocess

from utils.lessons.distributed import free_port  # noqa: F401  (re-exported for the server tests)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group started with start_new_session=True; SIGKILL it if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
