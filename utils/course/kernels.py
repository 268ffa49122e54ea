"""Notebooks run from code (the grader, `make outputs`, `make gpu-check`, the tests) wait on their kernel in short
slices, so that a missed wake-up costs a second, not the cell's whole time limit.

nbclient waits for a cell's reply with one asyncio poll of the kernel's shell socket, as long as the cell's time
limit. pyzmq wakes that poll from the socket's edge-triggered file descriptor, and the wake-up can be missed: the
reply then sits in the socket while the poll sleeps until its timeout, whose final non-blocking check finds it.
Seen in this course's test suite (two workers running notebooks side by side on two cores): in about one notebook
run in twenty, a cell that had finished in a second was waited on for 240 s, the cell limit; py-spy showed the
kernel idle and nbclient inside that poll. In the grader the same wait would end in "ran past the time limit" for
a correct answer. Here every wait is a series of polls of at most `SLICE_S`, each ending in that check.

A kernel can also die before its first reply (a port race, `started_again`): the grader and the suite's nbval
kernels start it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from queue import Empty
from typing import Any, TypeVar

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type
from traitlets.config import Config

from utils.validate import check_int

SLICE_S = 1.0
T = TypeVar("T")
DIED_AT_BIRTH = "before replying to kernel_info"  # jupyter_client's RuntimeError for a kernel dead at start


def started_again(start: Callable[[], T], attempts: int = 3) -> T:
    """`start()`, called again (up to `attempts` times in all) while the kernel it starts dies before its first
    reply. jupyter_client picks free TCP ports before the kernel binds them, and ipykernel binds a port it is given
    once (ipykernel/kernelapp.py, `_bind_socket`), so a process that takes one in between (another kernel, a server)
    kills the kernel at birth: met once in about ten runs of the test suite, which starts kernels on two workers and
    in graders at once. No cell has run then, so starting again changes nothing. `start` must clean up what a failed
    start left (nbclient's and nbval's starters do)."""
    if not callable(start):
        raise TypeError(f"start must be callable, got {type(start).__name__}")
    attempts = check_int("attempts", attempts, minimum=1)
    for _ in range(attempts - 1):
        try:
            return start()
        except RuntimeError as exc:
            if DIED_AT_BIRTH not in str(exc):
                raise
    return start()


class SlicedChannel(AsyncZMQSocketChannel):
    """A channel whose `get_msg(timeout)` polls in slices of at most SLICE_S seconds (same result, same Empty)."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:  # type: ignore[override]
        assert self.socket is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait_s = SLICE_S if remaining is None else min(SLICE_S, remaining)
            if await self.socket.poll(int(wait_s * 1000)):
                return await self._recv()
            if remaining is not None and remaining <= SLICE_S:
                raise Empty


class SlicedKernelClient(AsyncKernelClient):
    """nbclient's kernel client, with every channel waiting in slices."""

    shell_channel_class = Type(SlicedChannel)  # type: ignore[assignment]
    iopub_channel_class = Type(SlicedChannel)  # type: ignore[assignment]
    stdin_channel_class = Type(SlicedChannel)  # type: ignore[assignment]
    control_channel_class = Type(SlicedChannel)  # type: ignore[assignment]


def notebook_client_config() -> Config:
    """The config to pass as `NotebookClient(..., config=notebook_client_config())`."""
    return Config({"AsyncKernelManager": {"client_class": f"{__name__}.SlicedKernelClient"}})
