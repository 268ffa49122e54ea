"""utils.lessons.env's host checks: the driver against torch's CUDA build (bug 6), the allocator settings torch applies
(bug 8, checked against the installed torch), and nvidia-smi asked by the device's UUID (bug 10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from utils.lessons import env
from utils.lessons.env import (
    allocator_settings,
    cuda_build_note,
    device_uuid,
    nvidia_smi_cuda_version,
    nvidia_smi_memory_used,
    parse_driver_cuda_version,
)

REPO = Path(__file__).resolve().parents[1]
BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
+-----------------------------------------------------------------------------------------+
"""


def _fake_smi(folder: Path, body: str) -> None:
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_a_cuda_13_build_on_an_older_driver_gets_the_remedy_in_one_line():
    line = cuda_build_note("13.0", "12.4", False, "2.13.0+cu130")
    assert "\n" not in line and ">= 580" in line
    assert 'make lab TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"' in line
    cpu = cuda_build_note(None, "12.8", False, "2.13.0+cpu")
    assert "CPU-only" in cpu and "whl/cu128" in cpu
    assert "sees the GPU" in cuda_build_note("12.8", "13.0", True, "2.13.0")
    assert "CUDA_VISIBLE_DEVICES" in cuda_build_note("12.8", "12.8", False, "2.13.0") or \
        "nvidia-smi" in cuda_build_note("12.8", "12.8", False, "2.13.0")
    assert "update the NVIDIA driver" in cuda_build_note("13.0", "11.8", False, "2.13.0")
    assert cuda_build_note("12.8", None, False) is None  # no NVIDIA driver: nothing to compare


def test_cuda_build_note_bad_input():
    with pytest.raises(TypeError, match="gpu_visible"):
        cuda_build_note("12.8", "12.8", "yes")
    with pytest.raises(TypeError, match="driver_cuda"):
        cuda_build_note("12.8", 12.8, False)
    with pytest.raises(ValueError, match="text"):
        cuda_build_note("twelve", "12.8", False)


def test_driver_cuda_version_from_nvidia_smi_never_raises(monkeypatch, tmp_path):
    assert parse_driver_cuda_version(BANNER) == "12.4"
    assert parse_driver_cuda_version(None) is None and parse_driver_cuda_version("garbage") is None
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_smi_cuda_version() is None  # no nvidia-smi
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), "/usr/bin", "/bin"]))  # cat and sleep
    _fake_smi(tmp_path, f"cat <<'X'\n{BANNER}X\n")
    assert nvidia_smi_cuda_version() == "12.4"
    _fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed'\nexit 9\n")
    assert nvidia_smi_cuda_version() is None
    _fake_smi(tmp_path, "sleep 5\n")
    assert nvidia_smi_cuda_version(timeout_s=0.2) is None
    with pytest.raises(ValueError, match="timeout_s"):
        nvidia_smi_cuda_version(timeout_s=0)


def test_allocator_settings_follow_torch_2_13s_order():
    both = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    settings = allocator_settings(both)
    assert (settings.variable, settings.value, settings.ignored) == (
        "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", ("PYTORCH_ALLOC_CONF",))
    assert "ignored: PYTORCH_ALLOC_CONF" in str(settings) and "\n" not in str(settings)
    assert allocator_settings({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}).variable == "PYTORCH_ALLOC_CONF"
    assert allocator_settings({}).variable is None and "defaults" in str(allocator_settings({}))
    with pytest.raises(TypeError, match="environ"):
        allocator_settings({"PYTORCH_ALLOC_CONF": 1})


@pytest.mark.parametrize("variables", [
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"},
    {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}])
def test_allocator_settings_agree_with_the_installed_torch(variables):
    """The parsed settings of a fresh process (torch._C._accelerator_getAllocatorSettings: the string that
    AcceleratorAllocatorConfig parsed) are the ones allocator_settings names."""
    child_env = {k: v for k, v in os.environ.items() if k not in env.ALLOC_CONF_VARIABLES} | variables
    code = ("import json, torch; from utils.lessons.env import allocator_settings; "
            "print(json.dumps([torch._C._accelerator_getAllocatorSettings(), allocator_settings().value]))")
    out = subprocess.run([sys.executable, "-c", code], env=child_env | {"PYTHONPATH": str(REPO)}, cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    parsed, ours = json.loads(out.strip().splitlines()[-1])
    assert parsed == ours


def test_nvidia_smi_is_asked_by_uuid_not_by_torchs_index(monkeypatch, tmp_path):
    """Under CUDA_VISIBLE_DEVICES=1 torch's device 0 is nvidia-smi's GPU 1: only the UUID names it in both."""
    args_file = tmp_path / "args"
    _fake_smi(tmp_path, f'echo "$@" > {args_file}\necho 2048\n')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    props = SimpleNamespace(uuid="8f3c0a5e-1d2b-4c3d-9e8f-0123456789ab", total_memory=16 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert device_uuid() == "GPU-8f3c0a5e-1d2b-4c3d-9e8f-0123456789ab"
    assert nvidia_smi_memory_used() == 2048 * 2**20
    assert "--id=GPU-8f3c0a5e-1d2b-4c3d-9e8f-0123456789ab" in args_file.read_text()
    assert nvidia_smi_memory_used(uuid="MIG-abc") == 2048 * 2**20 and "--id=MIG-abc" in args_file.read_text()
    with pytest.raises(ValueError, match="index"):
        device_uuid(3)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=1))
    assert device_uuid() is None and nvidia_smi_memory_used() is None  # no UUID: never a guessed device
