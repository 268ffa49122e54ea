"""FSDP2 demos on an explicit CPU mesh (issue 21, bug 1): on a host whose accelerator is CUDA (faked here), a
`fully_shard` without a mesh builds a CUDA mesh and picks a GPU per rank; the course's workers are gloo processes on
the CPU and must say so. Launchers export no LOCAL_RANK naming a missing device."""

from __future__ import annotations

import importlib
import json
import os
import sys

import pytest
import torch
import torch.distributed as dist

from utils.lessons import distributed, fsdp_demo
from utils.lessons.distributed import accelerator_local_rank, free_port, launch_script


@pytest.fixture
def cuda_accelerator(monkeypatch):
    """torch reports a CUDA accelerator; touching CUDA itself fails (this machine has no GPU)."""
    importlib.import_module("torch._dynamo")  # its rule tables are built from the real torch.cuda functions

    def no_cuda(name):
        def touched(*args, **kwargs):
            raise AssertionError(f"the worker called torch.cuda.{name}: its mesh is not the CPU's")
        return touched

    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))
    for name in ("set_device", "current_device", "device_count", "_lazy_init", "init"):
        monkeypatch.setattr(torch.cuda, name, no_cuda(name))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # the workers set these in-process: restored after the test
    monkeypatch.setenv("MASTER_PORT", "0")
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.is_available(), reason="fakes a CUDA accelerator on a CPU-only machine")
def test_fsdp_peaks_worker_shards_on_a_cpu_mesh_under_a_cuda_accelerator(cuda_accelerator, tmp_path):
    out = tmp_path / "out.json"
    fsdp_demo._worker(0, 1, free_port(), 16, 2, 4, str(out))  # one rank, in this process
    ranks = json.loads(out.read_text())
    assert ranks[0]["at_rest"]["parameters"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="fakes a CUDA accelerator on a CPU-only machine")
def test_fsdp2_demo_worker_shards_on_a_cpu_mesh_under_a_cuda_accelerator(cuda_accelerator, tmp_path):
    out = tmp_path / "out.json"
    distributed._fsdp2_worker(0, 1, free_port(), 8, str(out))
    assert json.loads(out.read_text())["per_rank"][0]["parameters"] > 0


def test_cpu_mesh_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(RuntimeError, match="process group"):
        distributed.cpu_mesh()


def test_local_rank_only_for_devices_that_exist(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert [accelerator_local_rank(r, 2) for r in range(2)] == [None, None]  # one GPU, two ranks: no cuda:1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [accelerator_local_rank(r, 2) for r in range(2)] == ["0", "1"]  # a real per-GPU job
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert accelerator_local_rank(1, 2) is None  # CPU, MPS: no device to name
    with pytest.raises(ValueError, match="rank"):
        accelerator_local_rank(2, 2)
    with pytest.raises(TypeError, match="world_size"):
        accelerator_local_rank(0, 2.0)


def test_launch_script_exports_no_local_rank_on_a_one_gpu_host(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "7")  # inherited from a launcher around the notebook: not passed on
    script = tmp_path / "w.py"
    script.write_text("import json, os\n"
                      "if os.environ['RANK'] == '0':\n"
                      "    open(os.environ['COURSE_DIST_OUT'], 'w').write(json.dumps(os.environ.get('LOCAL_RANK')))\n")
    assert launch_script(script, world_size=2, timeout_s=60) is None
    assert os.environ["LOCAL_RANK"] == "7" and sys.executable
