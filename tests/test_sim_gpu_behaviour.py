"""The simulated GPU behaves like one where the chapters' GPU bugs live: its caching allocator is the model of
CUDACachingAllocator.cpp (utils/lessons/allocator_model.py) fed by the simulated tensors, its events complete only when
the host synchronises, and every Python child process runs under the same simulated device (tests/sim_site)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from simulated_gpu import PROFILE_ENV, SIM_SITE, simulated

MIB = 2**20
ROOT = Path(__file__).resolve().parent.parent


# --- the caching allocator behind torch.cuda.memory_* ---

def test_memory_counters_follow_the_caching_allocator():
    with simulated("t4"):
        x = torch.empty(1000, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() == 1024  # 512-byte rounding
        assert torch.cuda.memory_reserved() == 2 * MIB  # one small-pool segment
        y = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_reserved() == 22 * MIB  # and one 20 MiB large-pool segment
        stats = torch.cuda.memory_stats()
        assert stats["segment.small_pool.current"] == 1 and stats["segment.large_pool.current"] == 1
        assert stats["requested_bytes.all.current"] == 1000 + 3 * MIB
        del y
        z = torch.empty(MIB, dtype=torch.uint8)  # a CPU allocation: the simulated device does not see it
        w = torch.empty(2 * MIB, dtype=torch.uint8, device="cuda")  # reuses y's cached block (freed at this alloc)
        assert torch.cuda.memory_reserved() == 22 * MIB and torch.cuda.memory_allocated() == 1024 + 2 * MIB
        assert torch.cuda.max_memory_allocated() == 1024 + 3 * MIB
        torch.cuda.empty_cache()  # the large segment holds w: it stays
        assert torch.cuda.memory_reserved() == 22 * MIB
        del w
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 2 * MIB and torch.cuda.memory_allocated() == 1024
        assert "Non-releasable memory" in torch.cuda.memory_summary() and "GPU reserved segments" in \
            torch.cuda.memory_summary(abbreviated=True)
        segments = torch.cuda.memory._snapshot()["segments"]
        assert [s["segment_type"] for s in segments] == ["small"] and segments[0]["allocated_size"] == 1024
        del x, z


def test_fraction_cap_raises_torchs_oom_and_counts_it():
    with simulated("h100"):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(256 * MIB / total)
        try:
            kept = torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
            with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 100.00 MiB.*allowed"):
                torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        assert torch.cuda.memory_stats()["num_ooms"] == 1
        torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        del kept


def test_allocator_settings_come_from_the_environment(monkeypatch):
    """torch 2.13 reads the first set of PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF."""
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    with simulated("t4"):
        torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory._snapshot()["segments"][0]["is_expandable"]
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")  # set (to the defaults): it wins over PYTORCH_ALLOC_CONF
    with simulated("t4"):
        torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        assert not torch.cuda.memory._snapshot()["segments"][0]["is_expandable"]


def test_accelerator_api_answers_for_the_simulated_device():
    for profile, kind in (("t4", "cuda"), ("mps", "mps")):
        with simulated(profile):
            assert torch.accelerator.current_accelerator().type == kind and torch._C._get_accelerator().type == kind
            x = torch.empty(MIB, dtype=torch.uint8, device=kind)
            torch.accelerator.synchronize()
            assert torch.accelerator.memory_allocated() == MIB and torch.accelerator.memory_reserved() >= MIB
            del x


# --- events: work completes when the host synchronises ---

def test_events_complete_only_after_a_synchronize():
    with simulated("t4"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        assert end.query()  # never recorded: nothing to wait for
        start.record()
        (torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")).sum()
        end.record()
        assert not end.query() and not start.query()
        with pytest.raises(RuntimeError, match="device not ready"):  # the missing synchronize fails
            start.elapsed_time(end)
        end.synchronize()
        assert start.query() and end.query() and start.elapsed_time(end) >= 0


@pytest.mark.parametrize("how", ["device", "stream", "item", "cpu", "accelerator"])
def test_every_kind_of_host_wait_completes_the_events(how):
    with simulated("h100"):
        event = torch.cuda.Event()
        y = torch.ones(4, device="cuda") * 2
        event.record()
        assert not event.query() and not torch.cuda.current_stream().query()
        {"device": torch.cuda.synchronize, "stream": lambda: torch.cuda.current_stream().synchronize(),
         "item": lambda: y.sum().item(), "cpu": y.cpu, "accelerator": torch.accelerator.synchronize}[how]()
        assert event.query()


def test_a_timing_without_synchronize_is_caught():
    def careless() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.ones(8, device="cuda").sum()
        end.record()
        return start.elapsed_time(end)  # no end.synchronize(): reads a clock the GPU has not reached

    with simulated("t4"):
        with pytest.raises(RuntimeError, match="device not ready"):
            careless()
        from utils.lessons.timing import time_fn

        assert time_fn(lambda: torch.ones(8, device="cuda").sum(), repeats=2).median_s >= 0  # it synchronizes


# --- child processes: the same simulated device ---

def test_install_hands_the_simulation_to_children():
    before = os.environ.get("PYTHONPATH")
    with simulated("t4"):
        assert os.environ[PROFILE_ENV] == "t4" and os.environ["PYTHONPATH"].split(os.pathsep)[0] == SIM_SITE
    assert os.environ.get("PYTHONPATH") == before and PROFILE_ENV not in os.environ


def test_a_python_child_sees_the_simulated_gpu_and_says_so():
    code = ("import torch; x = torch.ones(3, device='cuda'); "
            "print(torch.cuda.get_device_name(), x.device, torch.cuda.memory_allocated())")
    with simulated("t4"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=dict(
            os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Tesla T4 (simulated on CPU) cuda:0 512"
    log = [line for line in out.stderr.splitlines() if line.startswith("[simulated GPU]")]
    assert log == [f"[simulated GPU] Tesla T4 (simulated on CPU) in child process {log[0].split()[-2]} (-c)"], \
        out.stderr
    print(log[0])  # the worker's own line


def test_a_child_without_torch_pays_nothing():
    with simulated("mps"):
        out = subprocess.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"],
                             capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False" and out.stderr == ""


def _spawned_worker(queue) -> None:
    import torch

    x = torch.zeros(2, device="mps")
    queue.put((torch.backends.mps.is_available(), str(x.device), torch.cuda.is_available()))


def test_a_spawned_worker_sees_the_simulated_device(capfd):
    with simulated("mps"):
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=_spawned_worker, args=(queue,))
        proc.start()
        seen = queue.get(timeout=180)
        proc.join(60)
    assert proc.exitcode == 0 and seen == (True, "mps:0", False)
    assert "[simulated GPU] Apple GPU (simulated on CPU) in child process" in capfd.readouterr().err


def test_launch_scripts_ranks_run_on_the_simulated_gpu(tmp_path):
    """utils.lessons.distributed.launch_script's ranks (torchrun's environment) see the parent's simulated device; on a
    one-GPU host rank 1 has no cuda:1, as on a real one."""
    from utils.lessons.distributed import launch_script

    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import json, os, torch
        rank = int(os.environ["RANK"])
        seen = {"name": torch.cuda.get_device_name(), "count": torch.cuda.device_count()}
        try:
            torch.cuda.set_device(rank)
            seen["set_device"] = "ok"
        except Exception as exc:
            seen["set_device"] = type(exc).__name__
        path = os.environ["COURSE_DIST_OUT"] + f".{rank}"
        open(path, "w").write(json.dumps(seen))
        if rank == 0:
            import time
            time.sleep(1)
            other = json.loads(open(os.environ["COURSE_DIST_OUT"] + ".1").read())
            open(os.environ["COURSE_DIST_OUT"], "w").write(json.dumps([seen, other]))
    """))
    with simulated("t4"):
        ranks = launch_script(script, world_size=2, timeout_s=240)
    assert [r["name"] for r in ranks] == ["Tesla T4 (simulated on CPU)"] * 2 and ranks[0]["count"] == 1
    assert [r["set_device"] for r in ranks] == ["ok", "AssertionError"]  # "invalid device ordinal" on a real T4


def test_out_of_memory_observers_and_the_oom_trace_entry():
    seen = []
    with simulated("t4"):
        torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
        torch.cuda.memory._record_memory_history(stacks="python")
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(512 * MIB / total)
        try:
            with pytest.raises(torch.OutOfMemoryError):
                torch.empty(600 * MIB, dtype=torch.uint8, device="cuda")
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        torch.cuda.memory._record_memory_history(enabled=None)
    (device, alloc, allowed, free), = seen
    assert (device, alloc) == (0, 600 * MIB) and allowed == int(512 * MIB / total * total) and free > 0
    assert trace[-1]["action"] == "oom" and trace[-1]["size"] == 600 * MIB and trace[-1]["device_free"] == free


@pytest.mark.filterwarnings("ignore:`export_memory_timeline` is deprecated:FutureWarning")
def test_profiler_memory_timeline_of_the_simulated_device(tmp_path):
    import json

    from torch.profiler import ProfilerActivity, profile

    with simulated("t4"):
        layer = torch.nn.Linear(64, 64).cuda()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            layer(torch.randn(8, 64, device="cuda")).sum().backward()
        prof.export_memory_timeline(str(tmp_path / "t.json"), device="cuda:0")
    times, sizes = json.loads((tmp_path / "t.json").read_text())
    assert times and max(sum(row) for row in sizes) > 0


FSDP_WORKER = """
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
try:
    layer = torch.nn.Linear(8, 8)
    if sys.argv[1] == "cpu-mesh":
        from utils.lessons.distributed import cpu_mesh
        fully_shard(layer, mesh=cpu_mesh())
    else:
        fully_shard(layer)  # no mesh: FSDP2 builds one on torch._C._get_accelerator()
    layer(torch.randn(2, 8)).sum().backward()
    print("rank", dist.get_rank(), "ok")
finally:
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "mesh", "failure"), [("t4", "default", "Invalid device id 1"),
                                                          ("mps", "default", "is_initialized"),
                                                          ("t4", "cpu-mesh", None), ("mps", "cpu-mesh", None)])
def test_fsdp2_worker_told_local_rank_1_on_a_one_gpu_host(tmp_path, profile, mesh, failure):
    """Issue 21 bug 1's class: a worker told LOCAL_RANK=1 on a one-GPU host whose fully_shard builds its default mesh
    on the accelerator asks for cuda:1 (invalid device ordinal on a real T4; the simulation's AssertionError here,
    since CUDA is not initialised yet in a fresh process), and on MPS DeviceMesh calls torch.mps.is_initialized,
    which does not exist; an explicit CPU mesh runs on both. One process (world size 1)."""
    from utils.lessons.distributed import free_port

    script = tmp_path / "worker.py"
    script.write_text(FSDP_WORKER)
    with simulated(profile):
        env = dict(os.environ, RANK="0", LOCAL_RANK="1", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), PYTHONPATH=os.pathsep.join([os.environ["PYTHONPATH"], str(ROOT)]))
        out = subprocess.run([sys.executable, str(script), mesh], capture_output=True, text=True, timeout=240,
                             env=env)
    if failure is None:
        assert out.returncode == 0 and "rank 0 ok" in out.stdout, out.stderr[-2000:]
    else:
        assert out.returncode != 0 and failure in out.stderr, out.stderr[-2000:]


def test_a_profiler_asked_for_the_cuda_activity_profiles_the_simulated_ops_quickly():
    """This build has no CUPTI: asked for ProfilerActivity.CUDA, kineto spent about 30 ms on every op (chapter 07's
    profiled step took 75 s). Under the simulation the CUDA activity is the CPU's (chapter 07's simulated runs
    export the "cuda:0" memory timeline from it)."""
    import time

    from torch.profiler import ProfilerActivity, profile

    with simulated("t4"):
        x = torch.randn(64, 64, device="cuda", requires_grad=True)
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                     record_shapes=True, with_stack=True) as prof:
            for _ in range(30):
                (x @ x).relu().sum().backward()
        assert time.perf_counter() - start < 2  # about 250 ops: over 7 s at 30 ms an op, 0.4 s with the fix
        assert any(e.name == "aten::mm" for e in prof.events())


# --- half-precision matmuls, computed in FP32 (fast on a CPU without native BF16) ---

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_matmuls_in_fp32_give_torchs_shape_dtype_and_values(dtype):
    """Each of HALF_MATMULS through `half_matmul_in_fp32` against torch's own kernel: same shape, dtype and
    contiguity, values within a rounding of the dtype; declined (None) for mixed dtypes and for `out=`."""
    from simulated_gpu import HALF_MATMULS, half_matmul_in_fp32

    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(s, generator=g).to(dtype) for s in ((16, 32), (32, 8), (16, 8)))
    ba, bb, bc = (torch.randn(s, generator=g).to(dtype) for s in ((3, 16, 32), (3, 32, 8), (3, 16, 8)))
    calls = {torch.ops.aten.mm.default: (a, b), torch.ops.aten.addmm.default: (c, a, b),
             torch.ops.aten.bmm.default: (ba, bb), torch.ops.aten.baddbmm.default: (bc, ba, bb)}
    assert {f.overloadpacket.__name__ for f in calls} == HALF_MATMULS
    for func, args in calls.items():
        ours, theirs = half_matmul_in_fp32(func, args, {}), func(*args)
        assert (ours.shape, ours.dtype, ours.is_contiguous()) == (theirs.shape, theirs.dtype, True)
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=2 * torch.finfo(dtype).eps, atol=1e-2)
    assert half_matmul_in_fp32(torch.ops.aten.mm.default, (a, b.float()), {}) is None
    assert half_matmul_in_fp32(torch.ops.aten.mm.default, (a.float(), b.float()), {}) is None
    assert half_matmul_in_fp32(torch.ops.aten.mm.out, (a, b), {"out": torch.empty(16, 8, dtype=dtype)}) is None

    class Subclass(torch.Tensor):  # e.g. an FP8 or NF4 tensor: its own __torch_dispatch__ runs its matmul
        pass

    assert half_matmul_in_fp32(torch.ops.aten.mm.default, (a.as_subclass(Subclass), b), {}) is None
