"""Every chapter under a SIMULATED GPU, and the simulation itself.

Each chapter notebook runs at COURSE_SIZE=tiny in a fresh kernel with torch.cuda simulated on the CPU as a T4
(capability 7.5, ~15 GiB) and with an Apple GPU (MPS) simulated (tests/simulated_gpu.py), and the chapters that read the
capability also as an H100 (9.0, ~79 GiB), so that every CUDA and MPS branch executes; the chapters whose figures depend
on the allocator run as a T4 at quick size with their figure assertions on. No cell may end in an error or print a
traceback. Memory figures come from a model of the caching allocator (utils/lessons/allocator_model.py), timings are the
CPU's. The notebook runs live in tests/test_simulated_gpu_{t4,t4_quick,h100,mps}.py, one file per run so that
pytest-xdist (--dist loadfile) spreads them over its workers; this file and tests/test_sim_gpu_behaviour.py test the
simulation itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from simulated_gpu import PROFILES, fake_nvidia_smi_dir, setup_cell_source, simulated, state

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_only_the_modules_that_answer_it_read_the_capability():
    """The H100 runs only the chapters whose code reads the capability (CAPABILITY_CHAPTERS): that is enough only
    if no other utils module branches on it behind a chapter's back."""
    import re

    from simulated_chapters import CAPABILITY_CHAPTERS, CAPABILITY_MODULES

    reads = re.compile(r"get_device_capability|capability_gates|is_bf16_supported|\.capability\b|"
                       r"transformer_engine_status")
    readers = sorted(p.stem for p in (ROOT / "utils").rglob("*.py") if reads.search(p.read_text()))
    assert set(readers) <= set(CAPABILITY_MODULES), readers
    assert {"00_setup_and_environment.ipynb", "04_automatic_mixed_precision.ipynb",
            "08_fp8_transformer_engine.ipynb"} <= set(CAPABILITY_CHAPTERS)


# --- the simulation itself, in this process ---

def test_timings_take_one_sample_under_the_simulation():
    import utils.lessons.timing as timing

    original, calls = timing.time_fn, []
    with simulated("t4"):
        t = timing.time_fn(lambda: calls.append(1), warmup=2, repeats=5)
        assert len(calls) == 1 and len(t.samples_s) == 1 and "CUDA events" in t.device
        with pytest.raises(ValueError, match="repeats"):
            timing.time_fn(lambda: None, repeats=0)
    assert timing.time_fn is original

def test_simulation_maps_the_device_to_the_cpu_and_back():
    real = torch.cuda.is_available()
    with simulated("t4") as profile:
        assert profile.capability == (7, 5)
        assert torch.cuda.is_available() and torch.cuda.get_device_capability() == (7, 5)
        x = torch.randn(4, 4, device="cuda")
        assert x.is_cuda and x.device == torch.device("cuda", 0)
        assert torch.device(x.untyped_storage().device).type == "cpu"  # really on the CPU
        assert (x @ x).is_cuda and x.cpu().device.type == "cpu" and x.to("cpu").device.type == "cpu"
        module = torch.nn.Linear(4, 4).cuda()
        assert all(p.is_cuda for p in module.parameters())
        module(x).sum().backward()
        assert module.weight.grad.is_cuda
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert module(x).dtype == torch.bfloat16 and torch.is_autocast_enabled("cuda")
        assert torch.cuda.memory_allocated() > 0 and state().workspaces
    assert torch.cuda.is_available() == real and not torch.randn(2).is_cuda
    assert "device" not in vars(torch.Tensor)


def test_simulation_events_oom_snapshot_and_counters():
    with simulated("h100"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.randn(64, 64, device="cuda").sum()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) >= 0
        torch.cuda.memory._record_memory_history(max_entries=1000, stacks="python")
        kept = torch.empty(2**20, device="cuda")
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        assert snap["segments"] and any(e["action"] == "alloc" for e in snap["device_traces"][0])
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() >= 4 * 2**20 and "SIMULATED" in torch.cuda.memory_summary()
        free, total = torch.cuda.mem_get_info()
        assert 0 < free < total
        torch.cuda.set_per_process_memory_fraction(0.0005)
        try:
            with pytest.raises(torch.OutOfMemoryError, match="simulated"):
                torch.empty(2**28, device="cuda")
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        del kept


def test_simulated_mps():
    with simulated("mps"):
        assert torch.backends.mps.is_available() and not torch.cuda.is_available()
        x = torch.ones(8, device="mps")
        assert x.device.type == "mps" and torch.mps.current_allocated_memory() >= 32
        assert torch.mps.recommended_max_memory() == PROFILES["mps"].total_memory


def test_setup_cell_and_bad_profile(tmp_path):
    assert "install('h100')" in setup_cell_source("h100")
    with pytest.raises(ValueError, match="profile"):
        with simulated("a100"):
            pass
    assert os.access(os.path.join(fake_nvidia_smi_dir(str(tmp_path)), "nvidia-smi"), os.X_OK)
