import matplotlib.pyplot as plt
import pytest
import torch

from utils.lessons.profiling import (
    allocation_trace,
    census_growth,
    graph_held_bytes,
    largest_fitting,
    live_tensors,
    plot_segments,
    plot_snapshot,
    profiler_timeline,
    replay,
    snapshot_timeline,
)


def test_census_finds_a_planted_leak():
    kept = []
    before = live_tensors()
    for _ in range(3):
        kept.append(torch.zeros(123, 7))
    grown = census_growth(before, live_tensors())
    assert grown[0] == (("cpu", "float32", (123, 7)), 3 * 123 * 7 * 4)
    with pytest.raises(TypeError, match="censuses"):
        census_growth([], {})


def test_largest_fitting():
    calls = []

    def fits(n):
        calls.append(n)
        return n <= 37

    assert largest_fitting(fits) == 37 and len(calls) < 20
    assert largest_fitting(lambda n: True, limit=100) == 100
    assert largest_fitting(lambda n: False, start=4) == 3
    with pytest.raises(ValueError, match="start"):
        largest_fitting(fits, start=0)
    with pytest.raises(TypeError, match="fits"):
        largest_fitting(3)


def test_snapshot_rendering_from_a_synthetic_trace():
    frames_a = [{"filename": "/x/torch/nn/linear.py", "line": 1, "name": "forward"},
                {"filename": "/nb/train.py", "line": 10, "name": "step"}]
    frames_b = [{"filename": "/nb/train.py", "line": 20, "name": "loss_fn"}]
    trace = [{"action": "alloc", "addr": 1, "size": 2**20, "frames": frames_a},
             {"action": "alloc", "addr": 2, "size": 2**21, "frames": frames_b},
             {"action": "free_requested", "addr": 1, "size": 2**20},
             {"action": "free_completed", "addr": 1, "size": 2**20},
             {"action": "segment_alloc", "addr": 9, "size": 2**22}]
    xs, series = snapshot_timeline({"segments": [], "device_traces": [trace]})
    assert xs == [0, 1, 2]
    assert series["step (train.py:10)"] == [2**20, 2**20, 0]
    assert series["loss_fn (train.py:20)"] == [0, 2**21, 2**21]
    fig = plot_snapshot({"device_traces": [trace]}, title="t")
    plt.close(fig)
    with pytest.raises(ValueError, match="device_traces"):
        snapshot_timeline({})
    with pytest.raises(ValueError, match="device"):
        snapshot_timeline({"device_traces": [trace]}, device=3)


def test_profiler_timeline_on_cpu():
    from torch.profiler import ProfilerActivity, profile

    m = torch.nn.Linear(64, 256)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        m(torch.randn(32, 64)).sum().backward()
    points = profiler_timeline(prof)
    assert max(b for _, b in points) >= 32 * 256 * 4
    assert [t for t, _ in points] == sorted(t for t, _ in points)
    with pytest.raises(ValueError, match="device"):
        profiler_timeline(prof, "tpu")


def test_graph_held_bytes_sees_a_kept_graph():
    lin = torch.nn.Linear(32, 64)
    kept = [torch.nn.functional.gelu(lin(torch.randn(16, 32))).sum() for _ in range(2)]
    # each graph saves the Linear's input (16 x 32) and the GELU's input (16 x 64), in float32
    assert graph_held_bytes(kept) == 2 * (16 * 32 + 16 * 64) * 4
    assert graph_held_bytes() >= graph_held_bytes(kept)  # the whole-process scan finds them too
    for t in kept:
        t.backward()  # backward frees what the graphs saved
    assert graph_held_bytes(kept) == 0
    with pytest.raises(TypeError, match="roots"):
        graph_held_bytes([1])


def test_frame_label_skips_cpp_and_torch_frames():
    from utils.lessons.profiling import frame_label, is_user_frame

    cpp = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"}
    lib = {"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"}
    user = {"filename": "/home/me/torch_experiments/train.py", "line": 42, "name": "train_step"}
    assert not is_user_frame(cpp) and not is_user_frame(lib) and is_user_frame(user)
    assert frame_label([cpp, lib, user]) == "train_step (train.py:42)"
    assert frame_label([cpp, cpp]) == "unknown (no Python frame)"
    # a stacks="all" trace: before the fix every allocation got the C++ frame's label
    trace = [{"action": "alloc", "addr": i, "size": 2**20, "frames": [cpp, lib, dict(user, line=i)]} for i in range(3)]
    _, series = snapshot_timeline({"device_traces": [trace]})
    assert set(series) == {"train_step (train.py:0)", "train_step (train.py:1)", "train_step (train.py:2)", "other"}


def test_bad_inputs_are_named():
    trace = {"device_traces": [[]]}
    with pytest.raises(ValueError, match="top"):
        snapshot_timeline(trace, top=0)
    with pytest.raises(TypeError, match="device"):
        snapshot_timeline(trace, device="0")
    with pytest.raises(TypeError, match="title"):
        plot_snapshot(trace, title=3)
    with pytest.raises(TypeError, match="limit"):
        largest_fitting(lambda n: True, limit=2.5)
    with pytest.raises(ValueError, match="limit"):
        largest_fitting(lambda n: True, start=5, limit=4)
    with pytest.raises(TypeError, match="tensors"):
        live_tensors([1, 2])
    with pytest.raises(TypeError, match="roots"):
        graph_held_bytes(torch.zeros(3))


def test_censuses_leave_out_parameters_and_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(512, 512)
    assert live_tensors([fake, torch.empty(3, device="meta")]) == {}
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    loss = mlp(torch.randn(4, 8)).sum()
    # the first Linear's input, the ReLU's output; the second Linear's saved weight is the parameter's memory
    assert graph_held_bytes([loss]) == (4 * 8 + 4 * 16) * 4


def test_profiler_readers_name_a_missing_profile():
    """Issue 27: profiler_timeline(None) raised AttributeError from inside; now a TypeError naming `prof`."""
    with pytest.raises(TypeError, match="prof"):
        profiler_timeline(None)
    with pytest.raises(TypeError, match="prof"):
        allocation_trace("not a profile")


def _profiled(fn):
    from torch.profiler import ProfilerActivity, profile

    from utils.lessons.quiet import native_stderr_silenced

    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return prof


def test_allocation_trace_replays_on_the_allocator_model():
    def step():
        kept.append(torch.empty(3 * 2**20, dtype=torch.uint8))  # a large-pool block that stays
        t = torch.empty(2**16, dtype=torch.uint8)  # a small-pool block, freed at once
        del t

    kept: list = []
    prof = _profiled(step)
    trace = allocation_trace(prof)
    sizes = [n for _, n in trace]
    assert 3 * 2**20 in sizes and 2**16 in sizes and -(2**16) in sizes and -(3 * 2**20) not in sizes
    with pytest.raises(ValueError, match="device"):
        allocation_trace(prof, "tpu")
    from utils.lessons.allocator_model import CachingAllocatorModel

    model = CachingAllocatorModel(2**30)
    live = replay(trace + [(12345, -999)], model)  # a free of memory allocated before the replay is skipped
    assert model.allocated == 3 * 2**20 and len(live) == 1
    assert model.reserved == 20 * 2**20 + 2 * 2**20  # one 20 MiB large segment, one 2 MiB small segment
    with pytest.raises(TypeError, match="allocator"):
        replay(trace, object())
    with pytest.raises(ValueError, match="pairs"):
        replay([(1, 2, 3)], model)
    with pytest.raises(TypeError, match="trace"):
        replay(None, model)


def test_plot_segments_draws_every_block():
    from utils.lessons.allocator_model import CachingAllocatorModel

    model = CachingAllocatorModel(2**30)
    handles = [model.malloc(8 * 2**20), model.malloc(3 * 2**19)]
    model.free(handles[0])
    fig = plot_segments(model.snapshot(), title="t")
    assert len(fig.axes[0].patches) == sum(len(s["blocks"]) for s in model.snapshot()) == 3
    assert fig.axes[0].get_title() == "t"
    plt.close(fig)
    with pytest.raises(TypeError, match="segments"):
        plot_segments([{"no": "blocks"}])
    with pytest.raises(ValueError, match="max_segments"):
        plot_segments([], max_segments=0)
