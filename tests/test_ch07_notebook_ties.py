"""Chapter 07's techniques stand in the notebook; utils keeps packaged copies for the lab and other chapters.
These tests extract each function from the notebook's cells, run it beside the packaged copy on the same inputs and
compare, and check the notebook's GPU-only cells against the bugs they once had (issue 12: bugs 5, 7 and 12)."""

from __future__ import annotations

import ast
import gc
import json
import os
import tempfile
import types
import warnings
from collections import Counter
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

from utils.lessons import oom, profiling
from utils.lessons.allocator_model import AllocatorOutOfMemoryError, CachingAllocatorModel
from utils.lessons.experiment_sizes import ch07 as sizes
from utils.lessons.quiet import native_stderr_silenced

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_memory_profiling.ipynb"
NAMES = ("gc_tensors", "live_tensors", "graph_held_bytes", "run_oom_safe", "largest_fitting", "frame_label",
         "allocator_block", "should_split", "fragmentation_sequence", "run_on_model", "fragmentation_figures",
         "split_then_big", "allocator_story", "allocator_picture", "growing_transients", "snapshot_on_oom",
         "read_oom_snapshot", "memory_timeline", "probe")
CONSTANTS = ("OOM_TEXTS", "TORCH_DIR", "MIN_BLOCK", "SMALL_SIZE", "SMALL_SEGMENT", "MIN_LARGE_ALLOC", "LARGE_SEGMENT",
             "ROUND_LARGE", "FRAGMENT", "ALLOC_CONF_VARIABLES", "MODEL", "GPU_BYTES", "oom_snapshot")


def _code_cells() -> list[str]:
    return [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]


def _cell_defining(name: str) -> str:
    for source in _code_cells():
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return source
    raise AssertionError(f"no notebook cell defines {name}()")


@pytest.fixture(scope="module")
def nb() -> types.SimpleNamespace:
    """The notebook's definitions (functions and the constants they use), executed in a fresh namespace."""
    wanted = []
    for source in _code_cells():
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in NAMES:
                wanted.append(node)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in CONSTANTS
                                                      for t in node.targets):
                wanted.append(node)
    namespace = {"gc": gc, "os": os, "warnings": warnings, "torch": torch, "Counter": Counter, "sizes": sizes,
                 "MiB": 2**20, "CachingAllocatorModel": CachingAllocatorModel,
                 "AllocatorOutOfMemoryError": AllocatorOutOfMemoryError, "plot_segments": profiling.plot_segments,
                 "native_stderr_silenced": native_stderr_silenced, "ProfilerActivity": ProfilerActivity,
                 "profile": profile, "tempfile": tempfile, "json": json}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(NOTEBOOK), "exec"), namespace)  # noqa: S102
    missing = [n for n in NAMES if n not in namespace]
    assert not missing, f"the notebook no longer defines {missing}"
    return types.SimpleNamespace(**namespace)


def _sample_tensors() -> list[torch.Tensor]:
    base = torch.randn(64, 32)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(1000, 1000)
    return [base, base[:8], base.t(), torch.zeros(3, dtype=torch.int8), torch.empty(0), torch.ones(5, 5).half(),
            torch.empty(10, device="meta"), fake, nn.Parameter(torch.randn(4, 4))]


def test_live_tensor_census_agrees(nb):
    tensors = _sample_tensors()
    assert nb.live_tensors(tensors) == profiling.live_tensors(tensors)
    assert nb.live_tensors(tensors)[("cpu", "float32", (64, 32))] == 64 * 32 * 4  # views counted once
    assert not any(shape == (1000, 1000) for _, _, shape in nb.live_tensors(tensors))  # fake: no memory
    kept = [torch.zeros(17, 19) for _ in range(3)]
    before_nb, before_utils = nb.live_tensors(), profiling.live_tensors()
    kept.append(torch.zeros(17, 19))
    assert profiling.census_growth(before_nb, nb.live_tensors()) == \
        profiling.census_growth(before_utils, profiling.live_tensors()) == [(("cpu", "float32", (17, 19)), 17 * 19 * 4)]


def _graphs() -> list[list[torch.Tensor]]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    x = torch.randn(64, 256)
    ce = F.cross_entropy(mlp(x), torch.randint(0, 10, (64,)))
    gelu = F.gelu(nn.Linear(32, 64)(torch.randn(16, 32, requires_grad=True))).sum()
    shared = torch.randn(8, 8, requires_grad=True)
    twice = (shared * shared).sum() + (shared.exp() * 2).sum()
    done = mlp(x).sum()
    done.backward()
    frozen = nn.Linear(8, 8).requires_grad_(False)
    through_frozen = frozen(torch.randn(4, 8, requires_grad=True)).tanh().sum()
    return [[ce], [gelu], [twice], [done], [ce, gelu, twice], [through_frozen], []]


def test_graph_census_agrees(nb):
    for roots in _graphs():
        assert nb.graph_held_bytes(roots) == profiling.graph_held_bytes(roots)
    ce = _graphs()[0][0]
    # input 64x256, ReLU output 64x512, log-softmax 64x10 (shared with NLL), int64 targets, a weight scalar
    assert nb.graph_held_bytes([ce]) == (64 * 256 + 64 * 512 + 64 * 10) * 4 + 64 * 8 + 4


def test_oom_safe_runner_agrees(nb):
    def planted(batch):
        saved = torch.empty(batch, 1024)  # noqa: F841 (held by the frame when the error is raised)
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch} MiB")

    cases = [((lambda a, b=1: a + b, 2), {"b": 3}), ((planted, 4), {}), ((torch.empty, 2**62), {"dtype": torch.uint8}),
             ((lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: out of memory\nmore")),), {})]
    for args, kwargs in cases:
        got = nb.run_oom_safe(*args, **kwargs)
        packaged = oom.run_oom_safe(*args, **kwargs)
        assert got == (packaged.ok, packaged.value, packaged.message)
    for bug in (lambda: 1 / 0, lambda: torch.zeros(2, 3) @ torch.zeros(2, 3)):
        with pytest.raises((ZeroDivisionError, RuntimeError)):
            nb.run_oom_safe(bug)
        with pytest.raises((ZeroDivisionError, RuntimeError)):
            oom.run_oom_safe(bug)


def test_largest_batch_search_agrees(nb):
    for threshold in (0, 1, 2, 3, 5, 37, 64, 100, 1000):
        for start, limit in ((1, 1), (1, 64), (1, 100), (3, 1000), (1, 4096)):
            if start > limit:
                continue
            calls_nb, calls_utils = [], []

            def fits(n, calls, threshold=threshold):
                calls.append(n)
                return n <= threshold

            got = nb.largest_fitting(lambda n, c=calls_nb: fits(n, c), start, limit)
            packaged = profiling.largest_fitting(lambda n, c=calls_utils: fits(n, c), start, limit)
            assert got == packaged == (min(threshold, limit) if threshold >= start else start - 1)
            assert calls_nb == calls_utils


def test_frame_label_agrees(nb):
    stacks = [
        [{"filename": "??", "line": 0, "name": "c10::malloc"},
         {"filename": "/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
         {"filename": "/home/me/train.py", "line": 42, "name": "train_step"}],
        [{"filename": "/home/me/torch_utils.py", "line": 3, "name": "helper"}],  # 'torch' in a name is not torch/
        [{"filename": "??", "line": 0, "name": "x"}], [],
        [{"filename": "C:\\work\\train.py", "line": 7, "name": "step"}],
    ]
    for frames in stacks:
        assert nb.frame_label(frames) == profiling.frame_label(frames)
    assert nb.frame_label(stacks[0]) == "train_step (train.py:42)"
    assert nb.frame_label(stacks[1]) == "helper (torch_utils.py:3)"
    assert nb.frame_label(stacks[2]) == "unknown (no Python frame)"


def test_allocator_rules_match_torch_headers(nb):
    header = Path(torch.__file__).parent / "include" / "c10" / "core" / "AllocatorConfig.h"
    if not header.exists():
        pytest.skip("torch's C++ headers are not installed")
    text = header.read_text()
    for name, value in (("kSmallBuffer", nb.SMALL_SEGMENT), ("kMinBlockSize", nb.MIN_BLOCK),
                        ("kSmallSize", nb.SMALL_SIZE), ("kMinLargeAlloc", nb.MIN_LARGE_ALLOC),
                        ("kRoundLarge", nb.ROUND_LARGE)):
        assert f"constexpr size_t {name} = {value};" in text
    assert nb.allocator_block(1) == ("small", 512, 2 * 2**20)
    assert nb.allocator_block(2**20) == ("small", 2**20, 2 * 2**20)  # exactly 1 MiB: the small pool
    assert nb.allocator_block(2**20 + 1) == ("large", 2**20 + 512, 20 * 2**20)
    assert nb.allocator_block(11 * 2**20 + 5) == ("large", 11 * 2**20 + 512, 12 * 2**20)


def test_fragmentation_survivors_pin_large_segments(nb):
    """Issue 12, bug 12: survivors of exactly 1 MiB go to the small pool and never pin large segments; issue 23:
    the section runs on the allocator model (utils/lessons/allocator_model.py), and its reading's directions hold."""
    assert sizes.FRAG_SURVIVOR_BYTES > 2**20
    assert f"{sizes.FRAG_SURVIVOR_BYTES}" in nb.FRAGMENT
    seq = nb.fragmentation_sequence(sizes.FRAG_PAIRS, sizes.FRAG_GROWING)
    alloc, peak, kept, stuck = nb.fragmentation_figures(nb.run_on_model(seq))
    assert alloc == sizes.FRAG_PAIRS * 2 * 2**20  # each 1.5 MiB survivor takes a 2 MiB block
    assert kept / alloc > 3 and stuck > 0  # survivors above 1 MiB pin their 20 MiB segments
    one_mib = nb.fragmentation_figures(nb.run_on_model(nb.fragmentation_sequence(
        sizes.FRAG_PAIRS, sizes.FRAG_GROWING, survivor=2**20)))
    assert one_mib[2] == one_mib[0] and one_mib[3] == 0  # exercise 3: at exactly 1 MiB they pin nothing
    expandable = nb.fragmentation_figures(nb.run_on_model(seq, "expandable_segments:True"))
    assert expandable[1] < peak and expandable[2] > 0.9 * kept  # the peak drops; empty_cache keeps nearly as much
    assert expandable[3] == 0 and expandable[2] / expandable[0] > kept / alloc  # counted differently, ratio higher


def test_max_split_size_keeps_the_big_block_whole(nb):
    outcome, stats = nb.split_then_big("")
    assert outcome.startswith("out of memory") and stats["num_alloc_retries"] == 1
    assert stats["inactive_split_bytes.all.current"] > 400 * 2**20  # the hole the small tensors left
    outcome, stats = nb.split_then_big("max_split_size_mb:200")
    assert outcome == "fits" and stats["reserved_bytes.all.peak"] > 600 * 2**20


def test_garbage_collection_threshold_needs_a_fraction(nb):
    off, half = nb.growing_transients(0.0), nb.growing_transients(0.5)
    assert half["num_alloc_retries"] == 0 < off["num_alloc_retries"]
    assert half["reserved_bytes.all.peak"] < off["reserved_bytes.all.peak"]
    assert nb.growing_transients(0.5, fraction_set=False)["num_alloc_retries"] == off["num_alloc_retries"]


def test_widget_function_and_exercise_2(nb):
    _, first = nb.allocator_story(8, 1536, 6, 12)
    assert first["later_block_new_MiB"] == 12 and first["non_releasable_MiB"] > 0
    assert nb.allocator_story(8, 1536, 6, 8)[1]["later_block_new_MiB"] == 0  # fits a hole
    assert nb.allocator_story(8, 1536, 6, 9)[1]["later_block_new_MiB"] == 20  # below 10 MiB: a 20 MiB segment
    assert nb.allocator_story(8, 1024, 6, 12)[1]["later_block_new_MiB"] == 0  # 1 MiB survivors pin no segment
    import matplotlib.pyplot as plt

    fig = nb.allocator_picture(8, 1536, 6, 12, "expandable_segments:True")
    assert nb.MODEL in fig.axes[0].get_title()
    plt.close(fig)


def test_oom_observer_writes_only_when_armed_and_reads_the_hole(nb, monkeypatch):
    dumped = []
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: dumped.append(path))
    nb.oom_snapshot.update(path=None, seen=None)
    nb.snapshot_on_oom(0, 600 * 2**20, 2**30, 10 * 2**20)
    assert dumped == [] and nb.oom_snapshot["seen"] is None
    nb.oom_snapshot["path"] = "x.pickle"
    nb.snapshot_on_oom(0, 600 * 2**20, 2**30, 10 * 2**20)
    assert dumped == ["x.pickle"] and nb.oom_snapshot["seen"] == (600 * 2**20, 2**30, 10 * 2**20)
    nb.oom_snapshot.update(path=None, seen=None)
    allocator = CachingAllocatorModel(nb.GPU_BYTES, fraction=2**30 / nb.GPU_BYTES)
    allocator.free(allocator.malloc(600 * 2**20))
    kept = [allocator.malloc(5 * 2**20) for _ in range(30)]
    with pytest.raises(AllocatorOutOfMemoryError):
        allocator.malloc(600 * 2**20)
    found = nb.read_oom_snapshot(allocator.snapshot(), 600 * 2**20)
    assert found["free_in_segments_MiB"] == found["largest_free_block_MiB"] == 450 < found["request_MiB"]
    assert len(kept) == 30
    source = next(s for s in _code_cells() if "_cuda_attach_out_of_memory_observer" in s)
    assert "_ch07_observer" in source  # attached once per process: observers cannot be detached


def test_child_sets_every_allocator_variable(monkeypatch):
    """Issue 21, bug 8: the fragmentation child sets PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF alike."""
    source = next(s for s in _code_cells() if "FRAGMENT = " in s)
    import subprocess

    envs = []

    def fake_run(*args, env=None, **kwargs):
        envs.append(env)
        return types.SimpleNamespace(stdout=f"{80 * 2**20} {610 * 2**20} {400 * 2**20} {320 * 2**20}", stderr="",
                                     returncode=0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # a parent's setting must not leak
    namespace = {"sizes": sizes, "os": os, "sys": __import__("sys"), "subprocess": subprocess, "MiB": 2**20,
                 "info": types.SimpleNamespace(is_cuda=True), "show_table": lambda rows, headers: None,
                 "run": types.SimpleNamespace(figure=lambda *a, **k: None), "GPU_BYTES": 16 * 2**30, "MODEL": "model",
                 "CachingAllocatorModel": CachingAllocatorModel, "show_gpu_reference": lambda figure: None,
                 "should_split": lambda *a: False}
    exec(compile(source, "fragment", "exec"), namespace)  # noqa: S102
    assert [(e["PYTORCH_ALLOC_CONF"], e["PYTORCH_CUDA_ALLOC_CONF"]) for e in envs] == [
        ("", ""), ("expandable_segments:True", "expandable_segments:True")]
    assert CachingAllocatorModel.alloc_conf_from_env(envs[0]) == ""  # what torch 2.13 reads in the child


def test_memory_timeline_profiles_the_gpu_on_cuda(nb, monkeypatch):
    """Issue 21, bug 4: on CUDA the timeline profiles CUDA activity and exports the GPU's memory."""
    seen = {}

    class FakeProfile:
        def __init__(self, activities, **kwargs):
            seen["activities"] = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def export_memory_timeline(self, path, device):
            seen["device"] = device
            with open(path, "w") as f:
                f.write("[[0, 1], [[0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0, 0]]]")

    namespace = vars(nb) | {"profile": FakeProfile}
    timeline = types.FunctionType(nb.memory_timeline.__code__, namespace)
    ms, names, series = timeline(lambda: None, "cuda:0")
    assert ProfilerActivity.CUDA in seen["activities"] and seen["device"] == "cuda:0"
    assert len(series) == len(names) and series[0][1] == 1 / 2**20
    ms, names, series = nb.memory_timeline(lambda: torch.ones(1000).sum(), "cpu")  # the real profiler, on the CPU
    assert len(ms) == len(series[0])
    source = next(s for s in _code_cells() if "def memory_timeline" in s)
    assert 'device.type == "mps"' in source and "native_stderr_silenced()" in source


def test_fragmentation_child_failure_is_one_line(monkeypatch, capsys):
    """Issue 12, bug 12: a failing child process is reported in one line, not a ValueError traceback."""
    source = next(s for s in _code_cells() if "FRAGMENT = " in s)
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(
        stdout="", stderr="Traceback...\ntorch.OutOfMemoryError: CUDA out of memory", returncode=1))
    namespace = {"sizes": sizes, "os": os, "sys": __import__("sys"), "subprocess": subprocess, "MiB": 2**20,
                 "info": types.SimpleNamespace(is_cuda=True), "show_table": lambda rows, headers: None,
                 "run": types.SimpleNamespace(figure=lambda *a, **k: None), "GPU_BYTES": 16 * 2**30, "MODEL": "model",
                 "CachingAllocatorModel": CachingAllocatorModel, "show_gpu_reference": lambda figure: None}
    rules = [n for n in ast.parse(_cell_defining("allocator_block")).body
             if (isinstance(n, ast.FunctionDef) and n.name in ("allocator_block", "should_split"))
             or (isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id in CONSTANTS for t in n.targets))]
    exec(compile(ast.Module(body=rules, type_ignores=[]), "rules", "exec"), namespace)  # noqa: S102
    exec(compile(source, "fragment", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "the child process failed (exit 1): torch.OutOfMemoryError: CUDA out of memory" in out


def test_probe_clears_gradients_after_any_failure(nb):
    """Issue 12, bug 5: an OOM in backward or in the optimizer step must not leave .grad filled."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(model, opt, batch):
        model(torch.randn(batch, 4)).sum().backward()
        if batch > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (planted after backward)")
        opt.step()
        opt.zero_grad(set_to_none=True)

    namespace = vars(nb) | {"train_step": train_step, "model": model, "opt": opt}
    probe = types.FunctionType(nb.probe.__code__, namespace)
    assert probe(2) is True and probe(8) is False
    assert all(p.grad is None for p in model.parameters())
    source = _cell_defining("probe")
    assert "finally:\n        opt.zero_grad(set_to_none=True)" in source


def test_snapshot_records_python_stacks_and_stops_in_finally():
    """Issue 12, bug 7: record with stacks="python" (C++ frames are '??' on release wheels), stop in a finally."""
    import inspect

    from torch.cuda import memory

    assert "stacks" in inspect.signature(memory._record_memory_history_impl).parameters
    sources = [s for s in _code_cells() if "_record_memory_history(" in s]
    assert len(sources) == 2  # the snapshot of three steps, and the out-of-memory observer's history
    for source in sources:
        tree = ast.parse(source)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") ==
                 "_record_memory_history"]
        start = [c for c in calls if any(k.arg == "stacks" for k in c.keywords)]
        assert start and all(ast.literal_eval(k.value) == "python"
                             for c in start for k in c.keywords if k.arg == "stacks")
        tries = [n for n in ast.walk(tree) if isinstance(n, ast.Try)]
        assert any("enabled=None" in ast.unparse(stmt) for t in tries for stmt in t.finalbody)
        assert "_dump_snapshot" in source


def test_memory_fraction_is_always_reset_in_the_notebook():
    """...to the fraction that was in force (COURSE_TIER's cap or 1.0), not to 1.0 (issue 33, bug 2)."""
    for source in _code_cells():
        if "set_per_process_memory_fraction(min" in source or "set_per_process_memory_fraction(t4" in source:
            tree = ast.parse(source)
            finals = [ast.unparse(s) for t in ast.walk(tree) if isinstance(t, ast.Try) for s in t.finalbody]
            assert any("set_per_process_memory_fraction(in_force)" in f for f in finals), source[:80]
            assert "in_force = memory_fraction_in_force()" in source, source[:80]


class _Block:
    def __init__(self, size: int, small: bool) -> None:
        self.size, self.small = size, small


@pytest.mark.parametrize("conf", [{}, {"max_split_size_mb": 200}, {"expandable_segments": True}])
def test_the_notebooks_split_rule_is_the_models(nb, conf: dict) -> None:
    """Issue 36, item 1: the notebook writes `should_split` as CUDACachingAllocator.cpp has it; the packaged model,
    which produces the chapter's allocator figures, must follow the same rule on every pool, size and setting."""
    MiB = 2**20
    model = CachingAllocatorModel(2**34, **conf)
    max_split = conf["max_split_size_mb"] * MiB if "max_split_size_mb" in conf else float("inf")
    sizes_ = [512, 1024, MiB - 512, MiB, MiB + 512, 3 * MiB // 2, 2 * MiB, 5 * MiB // 2, 10 * MiB, 20 * MiB,
              250 * MiB, 600 * MiB]
    for block in sizes_:
        for request in (r for r in sizes_ if r <= block):
            pool = "small" if block <= MiB else "large"
            ours = nb.should_split(pool, block, request, max_split, conf.get("expandable_segments", False))
            assert ours == model._should_split(_Block(block, pool == "small"), request), (pool, block, request)
    # the reading's case: a 2.5 MiB free block taken by a 1.5 MiB survivor keeps its 1 MiB remainder
    assert not nb.should_split("large", 5 * MiB // 2, 3 * MiB // 2)
    assert nb.should_split("large", 12 * MiB, 3 * MiB // 2)
