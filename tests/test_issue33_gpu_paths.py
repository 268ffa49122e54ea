"""Issue 33 (GPU paths, fourth audit): each bug's test (each fails on the code before the fix), and the simulation's
new eyes, each shown catching a planted bug of its class (tests/simulated_gpu.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from simulated_gpu import (
    CONTEXT_ENV,
    PROFILES,
    SMI_FILE_ENV,
    WORKSPACE_SM75_89,
    WORKSPACE_SM90,
    cuda_autocast_policy,
    fake_nvidia_smi_dir,
    run_notebook,
    simulated,
    state,
)

from utils.lessons import oom, sizes

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30
MIB = 2**20


def _code_cell(notebook: str, marker: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))


# --- bug 1: chapter 00's cuBLAS workspace row ---

def test_ch00_workspace_row_is_measured_after_earlier_matmuls():
    """Cell 10's step and the timed matmuls create the workspaces before the line items run: the cell must clear
    them first, or the row reads 0 B (the old cell did)."""
    source = _code_cell("00_setup_and_environment.ipynb", "def memory_line_items")
    function = source[:source.index("\nif info.is_cuda:")]
    from utils.lessons.env import nvidia_smi_memory_used
    from utils.lessons.measure import warm_up_cuda

    with simulated("t4"):
        w = torch.randn(64, 64, device="cuda", requires_grad=True)
        (torch.randn(8, 64, device="cuda") @ w).sum().backward()  # what cell 10 did: both workspaces exist
        assert len(state().workspaces) == 2
        ns = {"torch": torch, "warm_up_cuda": warm_up_cuda, "nvidia_smi_memory_used": nvidia_smi_memory_used}
        exec(function, ns)  # noqa: S102 (the notebook's own function)
        items = ns["memory_line_items"](4 * MIB)
        del w
    assert items[0][1] == 2 * WORKSPACE_SM75_89  # forward and autograd threads, 8.125 MiB each


# --- bug 2: the COURSE_TIER cap survives a chapter's own cap ---

@pytest.fixture
def rehearsed_t4(monkeypatch):
    monkeypatch.setenv("COURSE_TIER", "16")
    monkeypatch.setattr(sizes, "_CAPPED", type(sizes._CAPPED)())  # a fresh process's
    with simulated("h100"):
        total = torch.cuda.get_device_properties(0).total_memory
        assert sizes.memory_tier() == 16
        tier_cap = sizes.tier_memory_fraction(16, total)
        assert torch.cuda.get_per_process_memory_fraction() == pytest.approx(tier_cap)
        yield tier_cap
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_memory_fraction_cap_restores_the_tier_cap(rehearsed_t4):
    with oom.memory_fraction_cap(0.05):
        assert torch.cuda.get_per_process_memory_fraction() == pytest.approx(0.05)
    assert torch.cuda.get_per_process_memory_fraction() == pytest.approx(rehearsed_t4)  # was 1.0
    with pytest.raises(torch.OutOfMemoryError):  # and the rehearsal still fails where a T4 would
        torch.empty(15 * GIB, dtype=torch.uint8, device="cuda")


def test_tier_cap_is_reapplied_after_a_reset_to_one(rehearsed_t4):
    torch.cuda.set_per_process_memory_fraction(1.0)  # a cell of another chapter that still resets to 1.0
    assert sizes.experiment_size() and torch.cuda.get_per_process_memory_fraction() == pytest.approx(rehearsed_t4)
    torch.cuda.set_per_process_memory_fraction(0.01)  # a chapter's own smaller cap is left alone
    sizes.memory_tier()
    assert torch.cuda.get_per_process_memory_fraction() == pytest.approx(0.01)


def test_ch07_cells_restore_the_fraction_in_force():
    cells = json.loads((ROOT / "notebooks" / "07_memory_profiling.ipynb").read_text(encoding="utf-8"))["cells"]
    capped = [c for c in ("".join(x["source"]) for x in cells if x["cell_type"] == "code")
              if "set_per_process_memory_fraction(" in c]
    assert len(capped) >= 4
    for source in capped:
        assert "set_per_process_memory_fraction(1.0)" not in source, source[:80]
        assert "memory_fraction_in_force()" in source and "set_per_process_memory_fraction(in_force)" in source


# --- bug 6: tier thresholds off their edges ---

@pytest.mark.parametrize(("reported_gib", "tier"), [(14.7, 16), (19.5, 16), (21.9, 24), (22.0, 24), (22.5, 24),
                                                    (23.6, 24), (39.4, 40), (38.9, 40), (78.9, 80), (79.1, 80),
                                                    (139.8, 80)])
def test_tiers_start_below_the_typical_cards(reported_gib, tier):
    assert sizes.tier_for_memory(int(reported_gib * GIB)) == tier


def test_every_tier_budget_fits_a_card_at_the_tiers_lower_edge():
    from utils.ledger.budget import CUDA_CONTEXT_BYTES, WORKSPACE_BYTES

    for tier in sizes.TIERS[1:]:
        edge = sizes.TIER_MIN_REPORTED_BYTES[tier]
        assert sizes.tier_budget(tier) + CUDA_CONTEXT_BYTES + WORKSPACE_BYTES < edge, tier


# --- bug 5: chapter 00's wording and pinned links ---

def test_ch00_pins_torch_links_and_says_the_hip_variable_is_read_everywhere():
    text = (ROOT / "notebooks" / "00_setup_and_environment.ipynb").read_text(encoding="utf-8")
    assert "ROCm builds only" not in text
    assert not re.findall(r"github\.com/pytorch/pytorch/blob/main/", text)
    assert "github.com/pytorch/pytorch/blob/v2.13.0/" in text


def test_allocator_settings_read_the_hip_variable_on_any_build():
    from utils.lessons.env import allocator_settings

    got = allocator_settings({"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "x"})
    assert got.variable == "PYTORCH_HIP_ALLOC_CONF" and got.ignored == ("PYTORCH_ALLOC_CONF",)


# --- bug 7: the default workspace sizes ---

@pytest.mark.parametrize(("profile", "size"), [("t4", WORKSPACE_SM75_89), ("a10g", WORKSPACE_SM75_89),
                                               ("h100", WORKSPACE_SM90)])
def test_default_cublas_workspace_sizes(profile, size):
    assert WORKSPACE_SM75_89 == 8_519_680  # :4096:2:16:8, 8.125 MiB (not 8 MiB)
    with simulated(profile):
        a = torch.randn(16, 16, device="cuda")
        before = torch.cuda.memory_allocated()
        b = a @ a
        assert torch.cuda.memory_allocated() - before == size + 1024  # the workspace + b (512-rounded)
        del a, b


def test_measure_docstring_states_the_exact_workspace():
    from utils.lessons import measure

    assert "8,519,680" in measure.warm_up_cuda.__doc__ and "cuBLASLt" in measure.warm_up_cuda.__doc__


# --- bug 8: timings on a non-current device ---

def test_time_fn_records_its_events_on_the_timed_device(monkeypatch):
    from utils.lessons import timing

    current = [0]
    recorded = []

    @contextlib.contextmanager
    def device(dev):
        before, current[0] = current[0], torch.device(dev).index
        try:
            yield
        finally:
            current[0] = before

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self, stream=None):
            recorded.append(current[0] if stream is None else stream.device_index)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 1.0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: SimpleNamespace(
        device_index=current[0] if d is None else torch.device(d).index))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "GPU")
    timing.time_fn(lambda: None, warmup=0, repeats=2, device="cuda:1")
    assert recorded == [1, 1, 1, 1]  # was [0, 0, 0, 0]: device 0's stream


# --- bug 4: gpu-check ---

def test_gpu_check_matches_gpus_by_model_not_substring():
    from utils.course.gpu_check import reference_gpu

    assert reference_gpu("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert reference_gpu("NVIDIA A100-PCIE-40GB").name == "A100"
    assert reference_gpu("NVIDIA H100 80GB HBM3").name == "H100"
    assert reference_gpu("NVIDIA H100 NVL").name == "H100"
    assert reference_gpu("Tesla T4").name == "T4" and reference_gpu("NVIDIA A10G").name == "A10G"
    assert reference_gpu("NVIDIA A10") is None and reference_gpu("NVIDIA L40S") is None


def test_gpu_check_samples_the_device_peak_with_children_and_context(tmp_path, monkeypatch):
    """max_memory_allocated sees one process; nvidia-smi sees the kernel, its children and every CUDA context."""
    from utils.course.gpu_check import DevicePeakSampler

    readings = iter([500, 900, 2100, 1300])
    monkeypatch.setattr("utils.course.gpu_check._smi_memory_used",
                        lambda uuid=None, timeout_s=10.0: next(readings, 700) * MIB)
    with DevicePeakSampler("GPU-x", interval_s=0.001) as sampler:
        while sampler.samples < 5:
            pass
    assert sampler.peak == 2100 * MIB


# --- the simulation's blind spots: each catches a planted bug of its class ---

def _attention(dtype, profile_kind="cuda"):
    q = torch.randn(2, 4, 256, 64, device=profile_kind).to(dtype)
    return q, q.clone(), q.clone()


def test_sdpa_kernel_follows_capability_and_dtype():
    """Planted bug: code that assumes the flash kernel for BF16 on a T4 (the estimator's issue-32 error). On the CPU
    flash accepts BF16 anywhere; the simulated T4 refuses it, and picks the math path with its attention matrix."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def assumes_flash(q, k, v):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = _attention(torch.bfloat16, "cpu")
    assumes_flash(q, k, v)  # the CPU accepts it: a CPU-only test cannot see the bug
    with simulated("t4"):
        q, k, v = _attention(torch.bfloat16)
        with pytest.raises(RuntimeError, match="No available kernel"):
            assumes_flash(q, k, v)
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        math_peak = torch.cuda.max_memory_allocated() - start
        F.scaled_dot_product_attention(*_attention(torch.float32), is_causal=True)
        assert state().sdpa_choices == ["math", "efficient"]  # the refused call chose nothing
        del q, k, v
    assert math_peak >= 2 * 4 * 256 * 256 * 2  # the b x h x L x S BF16 matrix
    with simulated("h100"):
        q, k, v = _attention(torch.bfloat16)
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        assumes_flash(q, k, v)
        flash_peak = torch.cuda.max_memory_allocated() - start
        assert state().sdpa_choices == ["flash"]
        del q, k, v
    assert flash_peak < 2 * 4 * 256 * 256 * 2


def test_scaled_mm_layout_alignment_and_capability():
    """Planted bug: an FP8 GEMM with a row-major second operand, or a width not divisible by 16: the CPU's
    _scaled_mm computes it, cuBLASLt refuses it."""
    e4m3 = torch.float8_e4m3fn
    one = torch.tensor(1.0)

    def fp8(n, m, device):
        return torch.randn(n, m, device=device).to(e4m3)

    torch._scaled_mm(fp8(32, 32, "cpu"), fp8(32, 32, "cpu"), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    with simulated("h100"):
        s = torch.tensor(1.0, device="cuda")
        a, b = fp8(32, 32, "cuda"), fp8(32, 32, "cuda")
        with pytest.raises(RuntimeError, match="col_major"):
            torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="divisible by 16"):
            torch._scaled_mm(fp8(32, 24, "cuda"), fp8(16, 24, "cuda").t(), scale_a=s, scale_b=s,
                             out_dtype=torch.bfloat16)
        out = torch._scaled_mm(a, b.t().contiguous().t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)
        assert out.dtype == torch.bfloat16 and out.is_cuda
    with simulated("a10g"):
        s = torch.tensor(1.0, device="cuda")
        a = fp8(32, 32, "cuda")
        with pytest.raises(RuntimeError, match="compute capability"):
            torch._scaled_mm(a, a.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)


def test_cuda_autocast_follows_cudas_policy_not_the_cpus():
    """Planted bug: a verdict that reads CPU autocast's dtypes as CUDA's. CPU autocast keeps softmax, layer_norm,
    exp and sum in BF16; CUDA's runs them in FP32 (autocast_mode.h)."""
    policy = cuda_autocast_policy()
    if not policy:
        pytest.skip("this torch build ships no C++ headers")
    assert policy["softmax"] == "fp32" and policy["linear"] == "lower" and policy["addcmul"] == "promote"
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the CPU's policy: what the old simulation answered
        x = torch.randn(4, 8)
        assert F.softmax(x @ x.t(), -1).dtype == torch.bfloat16
    with simulated("t4"):
        lin = torch.nn.Linear(8, 8).to("cuda")
        x = torch.randn(4, 8, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16
            y = lin(x)
            got = {"linear": y.dtype, "matmul": (x @ x.t()).dtype, "softmax": F.softmax(y, -1).dtype,
                   "layer_norm": F.layer_norm(y, (8,)).dtype, "exp": torch.exp(y).dtype, "sum": y.sum().dtype,
                   "gelu": F.gelu(y).dtype, "addcmul": torch.addcmul(x, y, y).dtype,
                   "cross_entropy": F.cross_entropy(y, torch.zeros(4, dtype=torch.long, device="cuda")).dtype}
            with torch.autocast("cuda", enabled=False):
                assert (x @ x.t()).dtype == torch.float32 and not torch.is_autocast_enabled("cuda")
        y.float().sum().backward()
        assert lin.weight.grad.dtype == torch.float32 and not torch.is_autocast_enabled("cuda")
    assert got == {"linear": torch.bfloat16, "matmul": torch.bfloat16, "softmax": torch.float32,
                   "layer_norm": torch.float32, "exp": torch.float32, "sum": torch.float32,
                   "gelu": torch.bfloat16, "addcmul": torch.float32, "cross_entropy": torch.float32}


@pytest.mark.parametrize("context_mib", [400, 600])
def test_cuda_context_is_a_range_seen_by_nvidia_smi(context_mib, tmp_path, monkeypatch):
    """Planted bug: a figure that takes the CUDA context as a constant. The simulated context moves within 400-600
    MiB (COURSE_SIM_CONTEXT_MIB), and the fake nvidia-smi reports reserved + context, so chapter 00's context row
    (nvidia-smi minus reserved) measures it whatever it is."""
    from utils.lessons.env import nvidia_smi_memory_used

    monkeypatch.setenv(CONTEXT_ENV, str(context_mib))
    monkeypatch.setenv(SMI_FILE_ENV, str(tmp_path / "used"))
    monkeypatch.setenv("PATH", fake_nvidia_smi_dir(str(tmp_path)) + os.pathsep + os.environ["PATH"])
    with simulated("t4"):
        x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        free, total = torch.cuda.mem_get_info()
        assert total - free - torch.cuda.memory_reserved() == context_mib * MIB
        assert nvidia_smi_memory_used() - torch.cuda.memory_reserved() == context_mib * MIB
        del x
    monkeypatch.setenv(CONTEXT_ENV, "300")
    with pytest.raises(ValueError, match="COURSE_SIM_CONTEXT_MIB"), simulated("t4"):
        pass


PLANTED = {
    "fraction reset to 1.0": """
        import torch
        from utils.lessons.sizes import experiment_size
        experiment_size()
        torch.cuda.set_per_process_memory_fraction(0.2)
        try:
            pass
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        """,
    "allocator variable left set": """
        import os
        os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        """,
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_state_carried_between_cells_is_checked_at_the_end(planted, tmp_path):
    """A whole notebook in one simulated kernel: the end-state cell compares the fraction in force (COURSE_TIER's
    cap on the rehearsing H100) and the allocator variables with what the chapter promises."""
    import nbformat

    path = tmp_path / "planted.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(textwrap.dedent(PLANTED[planted]))]
    nbformat.write(nb, path)
    failures, _, _ = run_notebook(str(path), "h100", size="tiny", extra_env={"COURSE_TIER": "16"})
    assert [f.error for f in failures if "state carried" in f.error], failures
    nb.cells = [nbformat.v4.new_code_cell("from utils.lessons.sizes import experiment_size\nexperiment_size()")]
    nbformat.write(nb, path)
    failures, lines, _ = run_notebook(str(path), "h100", size="tiny", extra_env={"COURSE_TIER": "16"})
    assert not failures, failures


def test_profiles_cover_the_workshop_gpus():
    assert {p.capability for p in PROFILES.values() if p.kind == "cuda"} == {(7, 5), (8, 6), (9, 0)}
    assert sizes.tier_for_memory(PROFILES["a10g"].total_memory) == 24
    assert sizes.tier_for_memory(PROFILES["h100"].total_memory) == 80
