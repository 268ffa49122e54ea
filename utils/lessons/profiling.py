"""Memory profiling plumbing (chapter 07): live-tensor census, memory timelines, snapshot rendering, batch search.

These are packaged copies of the techniques chapter 07 writes out in its cells (the notebook is where they are
taught; tests/test_ch07_notebook_ties.py runs both on the same inputs and compares):

- `live_tensors()` counts the bytes of every tensor the garbage collector can reach, by (device, dtype, shape);
  comparing two censuses between training steps shows what leaks. `graph_held_bytes()` adds what kept autograd
  graphs hold (saved activations live in C++ nodes, out of the garbage collector's sight).
- `profiler_timeline(prof)` turns a `torch.profiler` run with `profile_memory=True` (CPU or CUDA) into
  (time, bytes allocated) points, from each op's own (self) allocations and frees.
- `allocation_trace(prof)` reads the same run's allocator events in order, each with its address, so that a step
  measured on any device can be replayed through `utils.lessons.allocator_model.CachingAllocatorModel` (`replay`): what
  CUDA's caching allocator would do with that step's allocations, on a CPU.
- `plot_segments(segments)` draws an allocator's segments and blocks (allocated, free) from a snapshot's
  "segments" list (`torch.cuda.memory._snapshot()` or the model's `snapshot()`).
- `snapshot_timeline` / `plot_snapshot` render a CUDA memory snapshot (`torch.cuda.memory._snapshot()` or a
  pickle from `_dump_snapshot`) with matplotlib: the official HTML viewer loads its JavaScript from the network and
  fails on an offline GPU host; this does not.
- `largest_fitting(fits, ...)` finds the largest integer for which `fits(n)` is true (doubling, then bisection).
"""

from __future__ import annotations

import gc
import os
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from utils.validate import check_choice, check_int, check_str

TensorKey = tuple[str, str, tuple[int, ...]]


def gc_tensors() -> list[torch.Tensor]:
    """Every tensor object the garbage collector can reach (after a collection)."""
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on some deprecated objects (torch.distributed.reduce_op) warns
        warnings.simplefilter("ignore")
        return [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]


def live_tensors(tensors: list[torch.Tensor] | None = None) -> Counter[TensorKey]:
    """Bytes of every tensor reachable by the garbage collector (or of `tensors`), keyed by (device, dtype, shape),
    each storage once; meta and fake tensors (no memory) are left out."""
    if tensors is not None and (not isinstance(tensors, list | tuple)
                                or not all(isinstance(t, torch.Tensor) for t in tensors)):
        raise TypeError("tensors must be a list of tensors or None")
    census: Counter[TensorKey] = Counter()
    seen: set[int] = set()
    for obj in gc_tensors() if tensors is None else tensors:
        try:
            storage = obj.untyped_storage()
        except Exception:  # tensors that refuse inspection (half-built, or without storage)
            continue
        key = storage._cdata
        if storage.device.type == "meta" or key in seen:  # meta and fake tensors hold no memory
            continue
        seen.add(key)
        census[(obj.device.type, str(obj.dtype).replace("torch.", ""), tuple(obj.shape))] += storage.nbytes()
    return census


def graph_held_bytes(roots: list[torch.Tensor] | None = None) -> int:
    """Bytes of the tensors saved for backward in every autograd graph still reachable from a live tensor
    (or only from `roots`, when given), each storage counted once, parameters excluded.

    A kept loss (or any output) that was never backpropagated holds its graph, and the graph holds saved
    activations in C++ nodes that a census of Python objects cannot see; walking `grad_fn` finds them.
    A matmul saves its weight too, as a view of the parameter: that is the parameter's memory, not the
    graph's, so storages of the graph's leaves (AccumulateGrad's `variable`) and of parameters are left out.
    """
    if roots is None:
        roots = gc_tensors()
    elif not isinstance(roots, list | tuple) or not all(isinstance(t, torch.Tensor) for t in roots):
        raise TypeError("roots must be a list of tensors or None")
    saved: dict[int, int] = {}  # storage id -> bytes
    leaves: set[int] = set()
    seen: set = set()  # the nodes themselves, alive until the walk ends: a freed node's id() can be a new node's
    stack = [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad: the leaf (a parameter) this graph ends at
            leaves.add(node.variable.untyped_storage()._cdata)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # freed by a backward pass: nothing held
                continue
            for t in value if isinstance(value, tuple | list) else (value,):
                if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) \
                        and not isinstance(t._base, torch.nn.Parameter) and t.untyped_storage().device.type != "meta":
                    storage = t.untyped_storage()
                    saved[storage._cdata] = storage.nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(nbytes for key, nbytes in saved.items() if key not in leaves)


def census_growth(before: Counter[TensorKey], after: Counter[TensorKey]) -> list[tuple[TensorKey, int]]:
    """What grew between two censuses, largest first: [(key, extra bytes)]."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        raise TypeError("before and after must be censuses from live_tensors()")
    grown = [(k, after[k] - before.get(k, 0)) for k in after if after[k] > before.get(k, 0)]
    return sorted(grown, key=lambda kv: -kv[1])


def _check_profile(prof: Any) -> None:
    if not isinstance(prof, torch.profiler.profile):
        raise TypeError(f"prof must be a finished torch.profiler.profile run, got {type(prof).__name__}")


def profiler_timeline(prof: Any, device: str = "cpu") -> list[tuple[float, int]]:
    """(time in microseconds, bytes allocated since the start) from a profile(profile_memory=True) run."""
    _check_profile(prof)
    check_choice("device", device, ("cpu", "cuda"))
    attr = "self_cpu_memory_usage" if device == "cpu" else "self_device_memory_usage"
    changes = sorted((e.time_range.start, getattr(e, attr, 0)) for e in prof.events() if getattr(e, attr, 0))
    points, total = [(0.0, 0)], 0
    for t, delta in changes:
        total += delta
        points.append((t, total))
    return points


def allocation_trace(prof: Any, device: str = "cpu") -> list[tuple[int, int]]:
    """The allocator events of a finished `profile(profile_memory=True)` run on `device` ("cpu", "cuda", "mps"),
    in time order: (address, +bytes) for an allocation, (address, -bytes) for a free."""
    _check_profile(prof)
    check_choice("device", device, ("cpu", "cuda", "mps"))
    from torch._C._profiler import _EventType

    events: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == device:
            events.append((node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size))
        stack.extend(node.children)
    return [(ptr, nbytes) for _, ptr, nbytes in sorted(events, key=lambda e: e[0]) if nbytes]


def replay(trace: list[tuple[int, int]], allocator: Any, live: dict[int, int] | None = None) -> dict[int, int]:
    """Apply `allocation_trace` events to a `CachingAllocatorModel`: each allocation becomes `malloc(bytes)`, each
    free of an address allocated during the replay a `free`; frees of memory allocated before it are skipped.
    Returns {address: handle} of what is still allocated (pass it back as `live` to continue a replay)."""
    if not isinstance(trace, list | tuple):
        raise TypeError(f"trace must be a list of (address, bytes) pairs, got {type(trace).__name__}")
    if not (callable(getattr(allocator, "malloc", None)) and callable(getattr(allocator, "free", None))):
        raise TypeError("allocator must have malloc and free (a CachingAllocatorModel), "
                        f"got {type(allocator).__name__}")
    live = {} if live is None else live
    if not isinstance(live, dict):
        raise TypeError(f"live must be a dict of address -> handle or None, got {type(live).__name__}")
    for event in trace:
        if not (isinstance(event, tuple | list) and len(event) == 2 and all(isinstance(v, int) for v in event)):
            raise ValueError(f"trace events must be (address, bytes) pairs of ints, got {event!r}")
        address, nbytes = event
        if nbytes > 0:
            live[address] = allocator.malloc(nbytes)
        elif address in live:
            allocator.free(live.pop(address))
    return live


def plot_segments(segments: list[Mapping[str, Any]], title: str = "", max_segments: int = 40) -> Figure:
    """One horizontal bar per segment (up to `max_segments`, largest first), its blocks coloured: allocated
    (dark) or free (light); a free block inside a segment that also holds an allocated one is hatched (a hole
    that `empty_cache()` cannot return)."""
    if not isinstance(segments, list) or not all(isinstance(s, Mapping) and "blocks" in s for s in segments):
        raise TypeError("segments must be a list of segment dicts with 'blocks' (a snapshot's 'segments')")
    check_str("title", title, non_empty=False)
    check_int("max_segments", max_segments, minimum=1)
    shown = sorted(segments, key=lambda s: -s["total_size"])[:max_segments]
    fig, ax = plt.subplots(figsize=(10, 1.8 + 0.28 * max(len(shown), 1)), layout="constrained")
    for row, seg in enumerate(shown):
        pinned = any(b["state"] == "active_allocated" for b in seg["blocks"])
        start = seg["address"]
        for block in seg["blocks"]:
            used = block["state"] == "active_allocated"
            ax.barh(row, block["size"] / 2**20, left=(block["address"] - start) / 2**20, height=0.8,
                    color="#1f4e79" if used else "#c9daf8", edgecolor="white", linewidth=0.5,
                    hatch="" if used or not pinned else "///")
    ax.set_yticks(range(len(shown)), [f"{s.get('segment_type', '')} {s['total_size'] / 2**20:.0f} MiB"
                                      for s in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="MiB from the segment's start", title=title or "Segments and blocks")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#1f4e79", label="allocated block"),
                       Patch(facecolor="#c9daf8", hatch="///", label="free, in a segment that stays"),
                       Patch(color="#c9daf8", label="free segment (empty_cache returns it)")],
              loc="lower right", fontsize=7)
    return fig


_TORCH_DIR = f"{os.sep}torch{os.sep}"


def is_user_frame(frame: Mapping[str, Any]) -> bool:
    """A Python frame of the learner's code: a `.py` file (C++ frames of release wheels carry "??") that does not
    live inside the torch package."""
    filename = str(frame.get("filename", ""))
    return filename.endswith(".py") and _TORCH_DIR not in filename.replace("/", os.sep)


def frame_label(frames: list[Mapping[str, Any]]) -> str:
    """'name (file.py:line)' of the first frame outside torch that is Python code (a snapshot recorded with
    stacks="python" has only Python frames; with stacks="all" the C++ frames come first and are skipped), or
    "unknown (no Python frame)" when there is none."""
    if not isinstance(frames, list) or not all(isinstance(f, Mapping) for f in frames):
        raise TypeError(f"frames must be a list of frame dicts (a snapshot's 'frames'), got {type(frames).__name__}")
    user = next((f for f in frames if is_user_frame(f)), None)
    if user is None:
        return "unknown (no Python frame)"
    filename = str(user.get("filename", "?")).replace("\\", "/").rsplit("/", 1)[-1]
    return f"{user.get('name', '?')} ({filename}:{user.get('line', '?')})"


def snapshot_timeline(snapshot: Mapping[str, Any], device: int = 0, top: int = 6
                      ) -> tuple[list[int], dict[str, list[int]]]:
    """Live bytes after each allocator event of a CUDA memory snapshot, split by the frame that allocated them
    (the `top` largest frames by peak, the rest as "other"). Returns (event index, {frame: bytes per event})."""
    if not isinstance(snapshot, Mapping) or "device_traces" not in snapshot:
        raise ValueError("snapshot must be a dict from torch.cuda.memory._snapshot() with 'device_traces'")
    check_int("device", device, minimum=0)
    check_int("top", top, minimum=1)
    traces = snapshot["device_traces"]
    if not 0 <= device < len(traces):
        raise ValueError(f"device must index one of the {len(traces)} device traces, got {device}")
    live: dict[int, tuple[str, int]] = {}
    per_frame: dict[str, int] = Counter()
    history: list[dict[str, int]] = []
    for event in traces[device]:
        action, addr, size = event.get("action"), event.get("addr"), event.get("size", 0)
        if action == "alloc":
            label = frame_label(event.get("frames") or [])
            live[addr] = (label, size)
            per_frame[label] += size
        elif action in ("free_completed",) and addr in live:
            label, size = live.pop(addr)
            per_frame[label] -= size
        else:
            continue
        history.append(dict(per_frame))
    peaks = Counter()
    for h in history:
        for label, nbytes in h.items():
            peaks[label] = max(peaks[label], nbytes)
    keep = [label for label, _ in peaks.most_common(top)]
    series: dict[str, list[int]] = {label: [h.get(label, 0) for h in history] for label in keep}
    series["other"] = [sum(v for k, v in h.items() if k not in keep) for h in history]
    return list(range(len(history))), series


def plot_snapshot(snapshot: Mapping[str, Any], device: int = 0, top: int = 6, title: str = "") -> Figure:
    """Stacked live allocations over the allocator's events, coloured by the frame that allocated them."""
    check_str("title", title, non_empty=False)
    xs, series = snapshot_timeline(snapshot, device, top)
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.stackplot(xs, [[v / 2**20 for v in ys] for ys in series.values()], labels=list(series))
    ax.set(xlabel="allocator event", ylabel="MiB allocated", title=title or "Live CUDA allocations by frame")
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return fig


def largest_fitting(fits: Callable[[int], bool], start: int = 1, limit: int = 2**20) -> int:
    """The largest n in [start, limit] with fits(n) true, assuming fits is monotone (true, then false).
    Returns start - 1 if even `start` does not fit. Doubles until a failure, then bisects."""
    if not callable(fits):
        raise TypeError(f"fits must be callable, got {type(fits).__name__}")
    check_int("start", start, minimum=1)
    check_int("limit", limit, minimum=start)
    if not fits(start):
        return start - 1
    good, bad = start, None
    while bad is None:
        candidate = min(good * 2, limit)
        if candidate == good:
            return good
        if fits(candidate):
            good = candidate
        else:
            bad = candidate
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good
