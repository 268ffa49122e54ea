"""Notebooks run from code wait on their kernel in slices: a missed wake-up costs a slice, not the time limit."""

from __future__ import annotations

import asyncio
import time
from queue import Empty

import nbformat
import pytest
from nbclient import NotebookClient

from utils.course import kernels


class _Socket:
    """A socket whose message shows only from the third poll on: what a missed edge-triggered wake-up looks like
    (the first polls sleep through their whole timeout although the message is, or becomes, there)."""

    def __init__(self, ready_from_poll: int | None) -> None:
        self.timeouts_ms: list[int] = []
        self.ready_from_poll = ready_from_poll

    async def poll(self, timeout_ms: int) -> int:
        self.timeouts_ms.append(timeout_ms)
        ready = self.ready_from_poll is not None and len(self.timeouts_ms) >= self.ready_from_poll
        if not ready:
            await asyncio.sleep(timeout_ms / 1000)
        return int(ready)


def _channel(socket: _Socket) -> kernels.SlicedChannel:
    channel = kernels.SlicedChannel.__new__(kernels.SlicedChannel)  # no real zmq socket needed
    channel.socket = socket  # type: ignore[assignment]

    async def recv() -> dict:
        return {"msg_type": "execute_reply"}

    channel._recv = recv  # type: ignore[method-assign]
    return channel


def test_a_missed_wake_up_costs_one_slice_not_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "SLICE_S", 0.05)
    socket = _Socket(ready_from_poll=3)
    start = time.monotonic()
    msg = asyncio.run(_channel(socket).get_msg(timeout=240))
    assert msg == {"msg_type": "execute_reply"}
    assert time.monotonic() - start < 5 and socket.timeouts_ms == [50, 50, 50]


def test_the_timeout_still_raises_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "SLICE_S", 0.05)
    socket = _Socket(ready_from_poll=None)
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(_channel(socket).get_msg(timeout=0.12))
    assert 0.1 <= time.monotonic() - start < 2
    assert socket.timeouts_ms[:2] == [50, 50] and sum(socket.timeouts_ms) <= 130


def test_nbclient_uses_the_sliced_client_and_runs_cells() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    client = NotebookClient(nb, kernel_name="python3", timeout=60, config=kernels.notebook_client_config())
    with client.setup_kernel():
        assert isinstance(client.kc, kernels.SlicedKernelClient)
        assert isinstance(client.kc.shell_channel, kernels.SlicedChannel)
        client.execute_cell(nb.cells[0], 0)
    assert nb.cells[0].outputs[0]["text"] == "42\n"
