import gc
import weakref

import pytest
import torch

from utils.lessons.oom import free_memory, run_oom_safe
from utils.lessons.sizes import SIZE_ENV, experiment_size, pick
from utils.lessons.timing import matmul_tflops, time_fn


def test_time_fn_labels_the_device():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=1, repeats=3, device="cpu")
    assert len(calls) == 4 and len(timing.samples_s) == 3
    assert timing.device == "CPU (perf_counter)"
    assert "CPU" in timing.label and timing.median_s >= 0


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"warmup": -1}, ValueError, "warmup"), ({"repeats": 0}, ValueError, "repeats"),
    ({"repeats": 2.5}, TypeError, "repeats"), ({"inner": 0}, ValueError, "inner"), ({"device": 3}, TypeError, "device"),
    ({"device": "meta"}, ValueError, "device"),
])
def test_time_fn_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        time_fn(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="fn"):
        time_fn(None)


def test_matmul_tflops_on_cpu():
    tflops, timing = matmul_tflops(64, torch.float32, "cpu", repeats=2)
    assert tflops > 0 and timing.device.startswith("CPU")
    with pytest.raises(ValueError, match="n must be"):
        matmul_tflops(0)
    with pytest.raises(TypeError, match="dtype"):
        matmul_tflops(8, torch.int32)


def test_sizes(monkeypatch):
    monkeypatch.setenv(SIZE_ENV, "full")
    assert experiment_size() == "full" and pick(1, 2) == 2
    monkeypatch.setenv(SIZE_ENV, "quick")
    assert pick(1, 2) == 1 and pick(1, 2, size="full") == 2
    monkeypatch.delenv(SIZE_ENV)
    assert experiment_size() == ("full" if torch.cuda.is_available() else "quick")
    monkeypatch.setenv(SIZE_ENV, "huge")
    with pytest.raises(ValueError, match=SIZE_ENV):
        experiment_size()
    with pytest.raises(ValueError, match="size"):
        pick(1, 2, size="medium")


def test_oom_is_caught_and_memory_released():
    holder = {}

    def experiment():
        big = torch.empty(1000, 1000)
        holder["ref"] = weakref.ref(big)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    result = run_oom_safe(experiment)
    gc.collect()
    assert not result and not result.ok
    assert "out of memory" in result.message and "80.00 GiB" in result.message
    assert holder["ref"]() is None, "the failed experiment's tensors must be freed"


def test_real_cpu_allocation_failure_is_caught():
    result = run_oom_safe(torch.empty, 2**62, dtype=torch.uint8)
    assert not result.ok and "out of memory" in result.message


def test_oom_safe_passes_values_and_real_bugs():
    assert run_oom_safe(lambda a, b=1: a + b, 2, b=3).value == 5
    with pytest.raises(ZeroDivisionError):
        run_oom_safe(lambda: 1 / 0)
    with pytest.raises(RuntimeError, match="shape"):
        run_oom_safe(lambda: torch.zeros(2, 3) @ torch.zeros(2, 3))
    with pytest.raises(TypeError, match="fn"):
        run_oom_safe("x")
    free_memory()


def test_time_fn_inner_loop_divides_by_the_calls():
    calls = []
    timing = time_fn(lambda: calls.append(1), warmup=0, repeats=2, device="cpu", inner=10)
    assert len(calls) == 20 and len(timing.samples_s) == 2


@pytest.mark.parametrize("profile", ["t4", "mps"])
def test_time_fn_on_a_simulated_gpu_uses_its_clock(profile):
    from simulated_gpu import simulated

    with simulated(profile):
        timing = time_fn(lambda: torch.ones(4, device="cuda" if profile == "t4" else "mps") * 2, repeats=2, inner=3)
        assert timing.device == ("Tesla T4 (simulated on CPU) (CUDA events)" if profile == "t4"
                                 else "Apple GPU (MPS, perf_counter)")
        tflops, _ = matmul_tflops(32, repeats=1)
        assert tflops > 0


def test_time_fn_refuses_a_missing_apple_gpu():
    from utils.lessons.env import mps_available

    if not mps_available():
        with pytest.raises(ValueError, match="MPS"):
            time_fn(lambda: None, device="mps")
    with pytest.raises(ValueError, match="device"):
        time_fn(lambda: None, device="not-a-device")


def test_pick_rejects_an_unknown_tier():
    with pytest.raises(ValueError, match="tier"):
        pick(1, {16: 1, 24: 2, 40: 3, 80: 4}, size="full", tier=32)
    assert pick(1, {16: 1, 24: 2, 40: 3, 80: 4}, size="full", tier=40) == 3


def test_compare_timings_reads_the_direction_and_the_spread():
    import time

    from utils.lessons.timing import compare_timings

    calls = {"short": 0, "long": 0}

    def short():
        calls["short"] += 1
        time.sleep(0.002)

    def long():
        calls["long"] += 1
        time.sleep(0.012)

    table = compare_timings({"short": short, "long": long}, repeats=4, warmup=1, min_sample_s=0, device="cpu")
    assert calls == {"short": 5, "long": 5}  # one warm-up each, then 4 interleaved rounds of one call
    assert table.names == ["short", "long"] and len(table["long"].samples_s) == 4
    assert table.ratio("long", "short") > 2 and table.distinct("long", "short")
    assert "slower" in table.reading("long", "short") and "faster" in table.reading("short", "long")
    rows = table.rows("short")
    assert rows[0][0] == "short" and rows[1][4].startswith("+") and "%" in rows[1][2]
    assert table["short"].iqr_s >= 0 and "torch.utils.benchmark" in table.device
    with pytest.raises(KeyError, match="nope"):
        table["nope"]


def test_compare_timings_overlapping_spreads_are_not_called_a_difference():
    from utils.lessons.timing import TimedConfig, TimingTable

    class M:  # a Measurement's two statistics
        def __init__(self, median, iqr):
            self.median, self.iqr, self.times = median, iqr, [median]

    table = TimingTable((TimedConfig("a", M(1.0, 0.2)), TimedConfig("b", M(1.05, 0.2))), "CPU", {"a": 1, "b": 1})
    assert not table.distinct("a", "b") and "not distinguishable" in table.reading("b", "a")
    table = TimingTable(tuple(TimedConfig(n, M(t, 0.01)) for n, t in (("a", 1.0), ("b", 1.5), ("c", 3.0))), "CPU",
                        {"a": 1, "b": 1, "c": 1})
    assert table.reading("b", "a") == "b is 50% slower than a (outside both spreads)"
    assert table.reading("c", "a") == "c is 3.0x slower than a: it takes 3.0 times as long (outside both spreads)"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"configs": {}}, TypeError, "configs"), ({"configs": [lambda: None]}, TypeError, "configs"),
    ({"configs": {"a": 3}}, TypeError, "configs"), ({"repeats": 1}, ValueError, "repeats"),
    ({"warmup": 0}, ValueError, "warmup"), ({"min_sample_s": -1}, ValueError, "min_sample_s"),
    ({"progress": 3}, TypeError, "progress"), ({"device": "meta"}, ValueError, "device"),
])
def test_compare_timings_bad_arguments(kwargs, error, match):
    from utils.lessons.timing import compare_timings

    args = {"configs": {"a": lambda: None}} | kwargs
    with pytest.raises(error, match=match):
        compare_timings(**args)
