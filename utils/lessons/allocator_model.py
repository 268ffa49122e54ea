"""A model of PyTorch's CUDA caching allocator, in pure Python (no torch, no GPU).

It follows `c10/cuda/CUDACachingAllocator.cpp` (torch 2.13, `DeviceCachingAllocator`) in what the course measures,
so that a CPU can show what a GPU's allocator would do with a sequence of allocations, and so that the simulated
GPU of the tests (tests/simulated_gpu.py) answers `torch.cuda.memory_*` from the same rules:

- every request is rounded up to a multiple of 512 bytes (`kMinBlockSize`, `round_size`);
- requests of at most 1 MiB (`kSmallSize`) come from the small pool, whose segments are 2 MiB (`kSmallBuffer`);
  larger ones from the large pool: a 20 MiB segment (`kLargeBuffer`) for requests below 10 MiB (`kMinLargeAlloc`),
  else the request rounded up to 2 MiB (`kRoundLarge`) (`get_allocation_size`);
- a request takes the smallest cached free block of its pool that fits (best fit, lowest address on ties:
  `BlockComparatorSize`, `get_free_block`), else a new segment (`alloc_block`);
- a block larger than the request is split when the rest is at least 512 bytes (small pool) or more than 1 MiB
  (large pool, and only for requests below `max_split_size`) (`should_split`); a freed block merges with free
  neighbours of its segment (`free_block`, `try_merge_blocks`);
- `max_split_size_mb`: a request below it never takes a cached block at or above it, a request at or above it
  takes a cached block less than 20 MiB larger (`get_free_block`), such blocks are never split, and before giving
  up the allocator frees cached oversize blocks (`release_available_cached_blocks`);
- `empty_cache()` releases every free block that is a whole segment, never a segment holding a live block
  (`release_cached_blocks`, `release_blocks`); a failed allocation does the same and retries once
  (`num_alloc_retries`) before raising out-of-memory (`num_ooms`);
- the per-process memory fraction caps reserved memory: a new segment that would take the reserved bytes above
  `fraction x capacity` fails (`setMemoryFraction`, `allowed_memory_maximum` in `alloc_block`);
- `expandable_segments`: one segment per pool that grows by mapping pages of 2 MiB (small pool) or 20 MiB (large
  pool) at its end, reusing its freed end, with free pages unmapped by `empty_cache()` (Note [Expandable
  Segments], `try_allocate_expandable_block`, `map_block`, `unmap_block`); such a segment counts in the reserved
  bytes but not in the `segment` statistic and never in `inactive_split`, as in the source;
- `memory_stats()` has the keys of `torch.cuda.memory_stats()` (`DeviceStats`, flattened as torch/cuda/memory.py
  does), `summary()` the layout of `torch.cuda.memory_summary()`, `snapshot()` the segments and blocks of
  `torch.cuda.memory._snapshot()`.

- `garbage_collection_threshold` (with a fraction set): before a new segment, whole cached large-pool segments are
  released, oldest first, while reserved is above threshold x the allowed memory (`garbage_collect_cached_blocks`).

Left out (the course never measures them): streams and cross-stream events, CUDA graph private pools,
`roundup_power2_divisions`, and the allocator settings changing mid-run.
The settings string follows `c10/core/AllocatorConfig.cpp`: `max_split_size_mb` must be at least 20
(`kLargeBuffer` / 1 MiB); of the variables, torch 2.13 reads the first one set (`alloc_conf_from_env`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = MIB  # kSmallSize: the largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 * MIB  # kSmallBuffer: "small" allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer: "large" allocations may be packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 * MIB  # kRoundLarge: larger allocations are rounded up to 2 MiB
ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch 2.13's order
_NO_SPLIT_LIMIT = 2**64 - 1  # max_split_size when unset (SIZE_MAX; memory_stats reports it as -1)
_POOLS = ("all", "small_pool", "large_pool")
_ARRAY_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                "active_bytes", "inactive_split_bytes", "requested_bytes")


class AllocatorOutOfMemoryError(RuntimeError):
    """The model's out-of-memory error (the simulated GPU raises torch.OutOfMemoryError with its message)."""


def _format_size(size: int) -> str:
    """Bytes as CUDACachingAllocator.cpp's `format_size` writes them in an out-of-memory message."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= MIB:
        return f"{size / 1024:.2f} KiB"
    if size <= 2**30:
        return f"{size / MIB:.2f} MiB"
    return f"{size / 2**30:.2f} GiB"


def _check_int(name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _check_fraction(fraction: Any) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"fraction must be a float, got {type(fraction).__name__}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    return float(fraction)


@dataclass
class _Stat:
    current: int = 0
    peak: int = 0
    allocated: int = 0
    freed: int = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.peak = max(self.peak, self.current)
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount


@dataclass(eq=False)
class _Segment:
    address: int
    small: bool
    expandable: bool
    page: int = 0  # the mapping granularity of an expandable segment


@dataclass(eq=False)
class _Block:
    address: int
    size: int
    segment: _Segment
    allocated: bool = False
    requested: int = 0
    mapped: bool = True
    prev: _Block | None = None
    next: _Block | None = None

    @property
    def small(self) -> bool:
        return self.segment.small

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def key(self) -> tuple[int, int]:
        return self.size, self.address


@dataclass(eq=False)
class _Pool:
    small: bool
    keys: list[tuple[int, int]] = field(default_factory=list)  # free mapped blocks by (size, address)
    blocks: dict[int, _Block] = field(default_factory=dict)  # address -> free mapped block
    unmapped: dict[int, _Block] = field(default_factory=dict)  # address -> unmapped range (expandable)
    free_block_calls: int = 0  # get_free_blocks_call_count (counted only under garbage collection)
    gc_base: dict[int, int] = field(default_factory=dict)  # address -> free_block_calls when it was cached

    def insert(self, block: _Block) -> None:
        bisect.insort(self.keys, block.key())
        self.blocks[block.address] = block
        self.gc_base[block.address] = self.free_block_calls

    def age(self, block: _Block) -> int:
        """Allocations searched in this pool since `block` was cached (the source's `gc_count`)."""
        return self.free_block_calls - self.gc_base[block.address]

    def remove(self, block: _Block) -> None:
        del self.keys[bisect.bisect_left(self.keys, block.key())]
        del self.blocks[block.address]
        del self.gc_base[block.address]

    def first_fit(self, size: int) -> int:
        """Index of the smallest free block of at least `size` bytes (lower_bound on the size comparator)."""
        return bisect.bisect_left(self.keys, (size, -1))


class CachingAllocatorModel:
    """One GPU's caching allocator: `malloc(size)` returns a handle, `free(handle)` returns its block to the cache.

    `capacity`: the GPU's total memory in bytes (what the fraction multiplies); `context_bytes`: memory the driver
    holds outside the allocator (the CUDA context), so a new segment fails above `capacity - context_bytes`;
    `max_split_size_mb` (at least 20), `expandable_segments` and `garbage_collection_threshold` (0 = off, else
    within (0, 1); it acts only once a fraction is set) as in PYTORCH_ALLOC_CONF; `fraction` as
    `torch.cuda.set_per_process_memory_fraction` (1.0 by default: no cap beyond the device).
    """

    def __init__(self, capacity: int, *, max_split_size_mb: int | None = None, expandable_segments: bool = False,
                 fraction: float = 1.0, context_bytes: int = 0, garbage_collection_threshold: float = 0.0) -> None:
        self.capacity = _check_int("capacity", capacity, minimum=1)
        self.context_bytes = _check_int("context_bytes", context_bytes, minimum=0)
        if context_bytes >= capacity:
            raise ValueError(f"context_bytes must be below capacity ({capacity}), got {context_bytes}")
        if max_split_size_mb is None:
            self.max_split_size = _NO_SPLIT_LIMIT
        else:
            _check_int("max_split_size_mb", max_split_size_mb, minimum=K_LARGE_BUFFER // MIB)
            self.max_split_size = max_split_size_mb * MIB
        if not isinstance(expandable_segments, bool):
            raise TypeError(f"expandable_segments must be a bool, got {type(expandable_segments).__name__}")
        self.expandable_segments = expandable_segments
        gc = garbage_collection_threshold
        if isinstance(gc, bool) or not isinstance(gc, int | float):
            raise TypeError(f"garbage_collection_threshold must be a float, got {type(gc).__name__}")
        if not (gc == 0 or 0 < gc < 1):
            raise ValueError(f"garbage_collection_threshold must be 0 (off) or within (0, 1), got {gc}")
        self.garbage_collection_threshold = float(gc)
        self.fraction = 1.0
        self._fraction_set = False
        if fraction != 1.0 or isinstance(fraction, bool) or not isinstance(fraction, int | float):
            self.set_memory_fraction(fraction)
        self._small, self._large = _Pool(small=True), _Pool(small=False)
        self._active: dict[int, _Block] = {}
        self._reserved_total = 0  # total_allocated_memory in the source: bytes held from the driver
        self._next_address = 1 << 40
        self._stats = {name: {pool: _Stat() for pool in _POOLS} for name in _ARRAY_STATS}
        self._oversize_allocations, self._oversize_segments = _Stat(), _Stat()
        self._counters = {"num_alloc_retries": 0, "num_ooms": 0, "num_sync_all_streams": 0, "num_device_alloc": 0,
                          "num_device_free": 0}
        self.trace: list[dict[str, Any]] | None = None  # allocator events, when recording (see `record`)

    @staticmethod
    def round_size(size: int) -> int:
        """The bytes the allocator hands out for a request of `size` bytes (a multiple of 512, at least 512)."""
        _check_int("size", size, minimum=0)
        return max(K_MIN_BLOCK_SIZE, -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE)

    @staticmethod
    def allocation_size(rounded: int) -> int:
        """The segment the allocator asks the driver for when no cached block fits a `rounded` request."""
        _check_int("rounded", rounded, minimum=1)
        if rounded <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if rounded < K_MIN_LARGE_ALLOC:
            return K_LARGE_BUFFER
        return -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE

    @staticmethod
    def alloc_conf_from_env(environ: Mapping[str, str]) -> str:
        """The allocator settings in force for a process started with `environ`: the first variable SET (even to
        "") of PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF, else "". That is torch 2.13's
        order (c10/core/AllocatorConfig.cpp and c10/cuda/CUDAAllocatorConfig.h; checked against the installed
        binary's torch._C._accelerator_getAllocatorSettings, as utils.lessons.env.allocator_settings is)."""
        if not isinstance(environ, Mapping):
            raise TypeError(f"environ must be a mapping, got {type(environ).__name__}")
        for name in ALLOC_CONF_VARIABLES:
            if name in environ:
                return environ[name]
        return ""

    @staticmethod
    def parse_alloc_conf(conf: str) -> dict[str, Any]:
        """`"expandable_segments:True,max_split_size_mb:128"` -> the model's keyword arguments (others are ignored)."""
        if not isinstance(conf, str):
            raise TypeError(f"conf must be a str, got {type(conf).__name__}")
        out: dict[str, Any] = {}
        for option in filter(None, (o.strip() for o in conf.split(","))):
            key, _, value = option.partition(":")
            key, value = key.strip(), value.strip()
            if key == "max_split_size_mb":
                if not value.isdigit():
                    raise ValueError(f"conf: max_split_size_mb needs a whole number of MiB, got {value!r}")
                out["max_split_size_mb"] = int(value)
            elif key == "garbage_collection_threshold":
                try:
                    out["garbage_collection_threshold"] = float(value)
                except ValueError:
                    raise ValueError(f"conf: garbage_collection_threshold must be a number, got {value!r}") from None
            elif key == "expandable_segments":
                if value not in ("True", "False"):
                    raise ValueError(f"conf: expandable_segments must be True or False, got {value!r}")
                out["expandable_segments"] = value == "True"
        return out

    @classmethod
    def from_conf(cls, capacity: int, conf: str, **kwargs: Any) -> CachingAllocatorModel:
        """A model with the settings of a PYTORCH_ALLOC_CONF string (see `parse_alloc_conf`)."""
        return cls(capacity, **(cls.parse_alloc_conf(conf) | kwargs))

    # --- the public operations ---

    def malloc(self, size: int) -> int:
        """Allocate `size` bytes (> 0); returns the block's address, the handle `free` takes."""
        _check_int("size", size, minimum=1)
        rounded = self.round_size(size)
        pool = self._small if rounded <= K_SMALL_SIZE else self._large
        alloc_size = self.allocation_size(rounded)
        block = self._get_free_block(pool, rounded)
        if block is None:
            if self._fraction_set and self.garbage_collection_threshold > 0:
                self._garbage_collect_cached_blocks()
            block = (self._alloc_block(pool, rounded, alloc_size, retry=False)
                     or (self._release_available_cached_blocks(pool, rounded)
                         and self._alloc_block(pool, rounded, alloc_size, retry=False))
                     or (self._release_cached_blocks()
                         and self._alloc_block(pool, rounded, alloc_size, retry=True)))
        if not block:
            self._counters["num_ooms"] += 1
            self._record("oom", 0, alloc_size)
            raise AllocatorOutOfMemoryError(self._oom_message(alloc_size))
        return self._alloc_found_block(block, rounded, size).address

    def free(self, handle: int) -> None:
        """Return the block `malloc` gave as `handle` to the cache (no memory goes back to the driver)."""
        _check_int("handle", handle)
        block = self._active.pop(handle, None)
        if block is None:
            raise ValueError(f"handle {handle} is not a live allocation of this allocator")
        block.allocated = False
        self._update(block.small, ("allocation",), -1)
        self._update(block.small, ("allocated_bytes",), -block.size)
        if block.size >= self.max_split_size:
            self._oversize_allocations.decrease(1)
        self._record("free_completed", block.address, block.requested)
        self._free_block(block)

    def empty_cache(self) -> None:
        """Release every cached block that is a whole segment (and unmap the free pages of expandable ones)."""
        self._release_cached_blocks()

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap this process's reserved memory at `fraction` x capacity, as set_per_process_memory_fraction."""
        self.fraction = _check_fraction(fraction)
        self._fraction_set = True

    def reset_peak_stats(self) -> None:
        """Every peak becomes its current value (torch.cuda.reset_peak_memory_stats)."""
        for stat in self._all_stats():
            stat.peak = stat.current

    def reset_accumulated_stats(self) -> None:
        """Zero the allocated/freed totals and the counters (torch.cuda.reset_accumulated_memory_stats)."""
        for stat in self._all_stats():
            stat.allocated = stat.freed = 0
        self._counters = dict.fromkeys(self._counters, 0)

    def record(self, enabled: bool = True) -> None:
        """Start (or stop and drop) recording allocator events into `trace`, as _record_memory_history."""
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        self.trace = [] if enabled else None

    @property
    def allocated(self) -> int:
        """Bytes of live blocks (torch.cuda.memory_allocated)."""
        return self._stats["allocated_bytes"]["all"].current

    @property
    def reserved(self) -> int:
        """Bytes held from the driver (torch.cuda.memory_reserved)."""
        return self._stats["reserved_bytes"]["all"].current

    def block_size(self, handle: int) -> int:
        """The bytes the live block `handle` occupies (its rounded size)."""
        block = self._active.get(_check_int("handle", handle))
        if block is None:
            raise ValueError(f"handle {handle} is not a live allocation of this allocator")
        return block.size

    def memory_stats(self) -> dict[str, int]:
        """The flat dict `torch.cuda.memory_stats()` returns, keys sorted."""
        out: dict[str, int] = {}
        for name, per_pool in self._stats.items():
            for pool, stat in per_pool.items():
                for kind in ("current", "peak", "allocated", "freed"):
                    out[f"{name}.{pool}.{kind}"] = getattr(stat, kind)
        for name, stat in (("oversize_allocations", self._oversize_allocations),
                           ("oversize_segments", self._oversize_segments)):
            for kind in ("current", "peak", "allocated", "freed"):
                out[f"{name}.{kind}"] = getattr(stat, kind)
        out.update(self._counters)
        out["max_split_size"] = -1 if self.max_split_size == _NO_SPLIT_LIMIT else self.max_split_size
        return dict(sorted(out.items()))

    def snapshot(self) -> list[dict[str, Any]]:
        """The segments of `torch.cuda.memory._snapshot()["segments"]`: one per segment (per mapped range of an
        expandable one), each with its blocks in address order, sorted by address."""
        heads = [b for b in self._every_block() if b.mapped and (b.prev is None or not b.prev.mapped)]
        segments = []
        for head in sorted(heads, key=lambda b: b.address):
            blocks, block = [], head
            while block is not None and block.mapped:
                blocks.append({"address": block.address, "size": block.size,
                               "requested_size": block.requested if block.allocated else 0,
                               "state": "active_allocated" if block.allocated else "inactive", "frames": []})
                block = block.next
            segments.append({
                "device": 0, "address": head.address, "stream": 0,
                "segment_type": "small" if head.small else "large", "segment_pool_id": (0, 0),
                "is_expandable": head.segment.expandable, "frames": [],
                "total_size": sum(b["size"] for b in blocks),
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "requested_size": sum(b["requested_size"] for b in blocks), "blocks": blocks})
        return segments

    def summary(self, abbreviated: bool = False, device: int = 0) -> str:
        """The text of `torch.cuda.memory_summary()` (its layout, from torch/cuda/memory.py), for these stats."""
        if not isinstance(abbreviated, bool):
            raise TypeError(f"abbreviated must be a bool, got {type(abbreviated).__name__}")
        stats = self.memory_stats()
        rule = "-" * 75
        lines = ["=" * 75, f" {'':16} PyTorch CUDA memory summary, device ID {device:<17d} ", rule,
                 f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
                 f"{stats['num_alloc_retries']:<8d}  ", "=" * 75,
                 "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
        rows = [("allocated_bytes", "Allocated memory", _format_bytes),
                ("active_bytes", "Active memory", _format_bytes),
                ("requested_bytes", "Requested memory", _format_bytes),
                ("reserved_bytes", "GPU reserved memory", _format_bytes),
                ("inactive_split_bytes", "Non-releasable memory", _format_bytes),
                ("allocation", "Allocations", _format_count), ("active", "Active allocs", _format_count),
                ("segment", "GPU reserved segments", _format_count),
                ("inactive_split", "Non-releasable allocs", _format_count)]
        for key, title, fmt in rows:
            lines.append(rule)
            subs = [("all", title)] + ([] if abbreviated else [("large_pool", "      from large pool"),
                                                               ("small_pool", "      from small pool")])
            ref = {k: stats[f"{key}.all.{k}"] for k in ("current", "peak", "allocated", "freed")}
            for sub, name in subs:
                cells = " | ".join(fmt(stats[f"{key}.{sub}.{k}"], ref[k])
                                   for k in ("current", "peak", "allocated", "freed"))
                lines.append(f" {name:<21} | {cells} ")
        for key, title in (("oversize_allocations", "Oversize allocations"),
                           ("oversize_segments", "Oversize GPU segments")):
            lines.append(rule)
            cells = " | ".join(_format_count(stats[f"{key}.{k}"], stats[f"{key}.{k}"])
                               for k in ("current", "peak", "allocated", "freed"))
            lines.append(f" {title:<21} | {cells} ")
        lines.append("=" * 75)
        return "|" + "|\n|".join(lines) + "|\n"

    # --- the allocator's private steps, named as in CUDACachingAllocator.cpp ---

    def _get_free_block(self, pool: _Pool, size: int) -> _Block | None:
        if self._fraction_set and self.garbage_collection_threshold > 0:
            pool.free_block_calls += 1  # block ages are tracked only when garbage collection can run
        i = pool.first_fit(size)
        if i == len(pool.keys):
            return None
        block = pool.blocks[pool.keys[i][1]]
        if block.segment.expandable:  # best fit counts the unmapped room after a block as its size
            def expandable_size(b: _Block) -> int:
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < len(pool.keys):
                nxt = pool.blocks[pool.keys[i + 1][1]]
                if not (nxt.segment.expandable and expandable_size(nxt) < expandable_size(block)):
                    break
                i, block = i + 1, nxt
        if size < self.max_split_size <= block.size:  # an oversize block never serves a smaller request
            return None
        if size >= self.max_split_size and block.size >= size + K_LARGE_BUFFER:  # nor one 20 MiB too large
            return None
        pool.remove(block)
        return block

    def _should_split(self, block: _Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: _Block, size: int, requested: int) -> _Block:
        pool = self._pool(block.small)
        if self._should_split(block, size):
            already_split = block.is_split()
            remaining = block
            block = _Block(remaining.address, size, remaining.segment, prev=remaining.prev, next=remaining)
            if block.prev is not None:
                block.prev.next = block
            remaining.prev = block
            remaining.address += size
            remaining.size -= size
            pool.insert(remaining)
            if not block.segment.expandable:
                if already_split:  # an inactive split block shrinks by `size`
                    self._update(block.small, ("inactive_split_bytes",), -block.size)
                else:  # a new inactive split block: the rest
                    self._update(block.small, ("inactive_split_bytes",), remaining.size)
                    self._update(block.small, ("inactive_split",), 1)
        elif block.is_split() and not block.segment.expandable:  # a split block becomes active
            self._update(block.small, ("inactive_split_bytes",), -block.size)
            self._update(block.small, ("inactive_split",), -1)
        block.allocated, block.requested = True, requested
        self._active[block.address] = block
        self._update(block.small, ("allocation", "active"), 1)
        self._update(block.small, ("allocated_bytes", "active_bytes"), block.size)
        self._update(block.small, ("requested_bytes",), requested)
        if block.size >= self.max_split_size:
            self._oversize_allocations.increase(1)
        self._record("alloc", block.address, requested)
        return block

    def _free_block(self, block: _Block) -> None:
        pool = self._pool(block.small)
        original, requested = block.size, block.requested
        net_blocks = net_bytes = 0
        for candidate in (block.prev, block.next):
            subsumed = self._try_merge_blocks(block, candidate, pool)
            if subsumed:
                net_blocks -= 1
                net_bytes -= subsumed
        pool.insert(block)
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        if not block.segment.expandable:
            self._update(block.small, ("inactive_split",), net_blocks)
            self._update(block.small, ("inactive_split_bytes",), net_bytes)
        self._update(block.small, ("active",), -1)
        self._update(block.small, ("active_bytes",), -original)
        self._update(block.small, ("requested_bytes",), -requested)
        block.requested = 0

    def _try_merge_blocks(self, dst: _Block, src: _Block | None, pool: _Pool) -> int:
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            del pool.unmapped[src.address]
        if dst.prev is src:  # [src dst]
            dst.address = src.address
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int, retry: bool) -> _Block | None:
        if retry:
            self._counters["num_alloc_retries"] += 1
        if self._fraction_set and self._reserved_total + alloc_size > int(self.fraction * self.capacity):
            return None
        if self.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        if self._reserved_total + alloc_size > self.capacity - self.context_bytes:  # cudaMalloc fails
            return None
        segment = _Segment(self._take_addresses(alloc_size), pool.small, expandable=False)
        self._reserved_total += alloc_size
        self._update(pool.small, ("segment",), 1)
        self._update(pool.small, ("reserved_bytes",), alloc_size)
        if alloc_size >= self.max_split_size:
            self._oversize_segments.increase(1)
        self._counters["num_device_alloc"] += 1
        self._record("segment_alloc", segment.address, alloc_size)
        return _Block(segment.address, alloc_size, segment)

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        if self.max_split_size == _NO_SPLIT_LIMIT:
            return False
        key = max(size, self.max_split_size)
        i = pool.first_fit(key)
        if i < len(pool.keys):
            block = pool.blocks[pool.keys[i][1]]
            if block.is_split() or block.segment.expandable:
                return False
            self._release_block(block)
            return True
        released = 0
        for _, address in reversed(list(pool.keys)):  # free oversize blocks, largest first, until enough
            block = pool.blocks[address]
            if released >= key or block.size < self.max_split_size:
                break
            if not block.is_split() and not block.segment.expandable:
                released += block.size
                self._release_block(block)
        return released >= key

    def _garbage_collect_cached_blocks(self) -> None:
        """Above threshold x the allowed memory, release whole cached large-pool segments, oldest first: each pass
        frees those at least as old as the mean age, until the excess is reclaimed (`garbage_collect_cached_blocks`)."""
        limit = int(self.garbage_collection_threshold * int(self.fraction * self.capacity))
        if self._reserved_total <= limit:
            return
        target, reclaimed = self._reserved_total - limit, 0
        pool = self._large
        candidates = [pool.blocks[a] for _, a in pool.keys]
        candidates = [b for b in candidates if not b.is_split() and not b.segment.expandable]
        total_age, count = sum(pool.age(b) for b in candidates), len(candidates)
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold = total_age / count
            freed = False
            for _, address in list(pool.keys):
                block = pool.blocks.get(address)
                if block is None or block.is_split() or block.segment.expandable or pool.age(block) < threshold:
                    continue
                freed = True
                reclaimed += block.size
                total_age -= pool.age(block)
                count -= 1
                self._release_block(block)

    def _release_cached_blocks(self) -> bool:
        self._counters["num_sync_all_streams"] += 1
        for pool in (self._large, self._small):
            expandable = []
            for _, address in list(pool.keys):
                block = pool.blocks[address]
                if block.segment.expandable:
                    expandable.append(block)
                elif not block.is_split():
                    self._release_block(block)
            for block in expandable:
                self._unmap_block(block)
        return True

    def _release_block(self, block: _Block) -> None:
        pool = self._pool(block.small)
        pool.remove(block)
        self._reserved_total -= block.size
        self._update(block.small, ("segment",), -1)
        self._update(block.small, ("reserved_bytes",), -block.size)
        if block.size >= self.max_split_size:
            self._oversize_segments.decrease(1)
        self._counters["num_device_free"] += 1
        self._record("segment_free", block.address, block.size)

    # --- expandable segments ---

    def _try_allocate_expandable_block(self, pool: _Pool, size: int) -> _Block | None:
        candidate = self._find_expandable_block(pool, size)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:  # free -> unmapped -> ...: map the rest, which merges into one block
            following = candidate.next
            assert following is not None and not following.mapped
            if not self._map_block(following, min(size - candidate.size, following.size)):
                return None
            candidate = following
        pool.remove(candidate)
        return candidate

    def _find_expandable_block(self, pool: _Pool, size: int) -> _Block:
        def room(b: _Block | None) -> int:
            total = 0
            while b is not None and not b.allocated and total < size:
                total += b.size
                b = b.next
            return total

        for address in sorted(pool.unmapped):
            c = pool.unmapped[address]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if room(c) >= size:
                return c
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        span = -(-(self.capacity + self.capacity // 8) // page) * page  # address space: 1 1/8 of the GPU
        segment = _Segment(self._take_addresses(span), pool.small, expandable=True, page=page)
        block = _Block(segment.address, span, segment, mapped=False)
        pool.unmapped[block.address] = block
        return block

    def _map_block(self, block: _Block, size: int) -> bool:
        segment, pool = block.segment, self._pool(block.small)
        offset = block.address - segment.address
        end = -(-(offset + size) // segment.page) * segment.page
        mapped = end - offset
        if self._reserved_total + mapped > self.capacity - self.context_bytes:  # cuMemCreate fails
            return False
        del pool.unmapped[block.address]
        block.mapped = True
        if mapped < block.size:
            rest = _Block(block.address + mapped, block.size - mapped, segment, mapped=False, prev=block,
                          next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            pool.unmapped[rest.address] = rest
            block.size = mapped
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.insert(block)
        self._reserved_total += mapped
        self._update(block.small, ("reserved_bytes",), mapped)
        self._counters["num_device_alloc"] += 1
        self._record("segment_map", block.address, mapped)
        return True

    def _unmap_block(self, block: _Block) -> None:
        segment, pool = block.segment, self._pool(block.small)
        offset = block.address - segment.address
        begin = -(-offset // segment.page) * segment.page
        end = (offset + block.size) // segment.page * segment.page
        if begin >= end:
            return
        pool.remove(block)
        before, after = begin - offset, offset + block.size - end
        if before:
            piece = _Block(block.address, before, segment, prev=block.prev, next=block)
            if block.prev is not None:
                block.prev.next = piece
            block.prev = piece
            pool.insert(piece)
        if after:
            piece = _Block(segment.address + end, after, segment, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = piece
            block.next = piece
            pool.insert(piece)
        block.address, block.size, block.mapped = segment.address + begin, end - begin, False
        unmapped = block.size
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.unmapped[block.address] = block
        self._reserved_total -= unmapped
        self._update(block.small, ("reserved_bytes",), -unmapped)
        self._counters["num_device_free"] += 1
        self._record("segment_unmap", segment.address + begin, unmapped)
        if block.prev is None and block.next is None:  # the whole segment is unmapped: give it back
            del pool.unmapped[block.address]

    # --- plumbing ---

    def _pool(self, small: bool) -> _Pool:
        return self._small if small else self._large

    def _take_addresses(self, nbytes: int) -> int:
        address = self._next_address
        self._next_address += -(-nbytes // K_LARGE_BUFFER) * K_LARGE_BUFFER + K_LARGE_BUFFER
        return address

    def _update(self, small: bool, names: tuple[str, ...], amount: int) -> None:
        if amount == 0:
            return
        for name in names:
            for pool in ("all", "small_pool" if small else "large_pool"):
                stat = self._stats[name][pool]
                if amount > 0:
                    stat.increase(amount)
                else:
                    stat.decrease(-amount)

    def _all_stats(self) -> list[_Stat]:
        return [s for per_pool in self._stats.values() for s in per_pool.values()] + [
            self._oversize_allocations, self._oversize_segments]

    def _every_block(self) -> list[_Block]:
        return list(itertools.chain(self._active.values(), self._small.blocks.values(),
                                    self._large.blocks.values()))

    def _record(self, action: str, address: int, size: int) -> None:
        if self.trace is not None:
            self.trace.append({"action": action, "addr": address, "size": size, "stream": 0, "frames": []})

    def _oom_message(self, alloc_size: int) -> str:
        free = max(0, self.capacity - self.context_bytes - self._reserved_total)
        allowed = f"{_format_size(int(self.fraction * self.capacity))} allowed; " if self._fraction_set else ""
        return (f"CUDA out of memory. Tried to allocate {_format_size(alloc_size)}. GPU 0 has a total capacity of "
                f"{_format_size(self.capacity)} of which {_format_size(free)} is free. {allowed}Of the allocated "
                f"memory {_format_size(self.allocated)} is allocated by PyTorch, and "
                f"{_format_size(self.reserved - self.allocated)} is reserved by PyTorch but unallocated. If reserved "
                "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
                "avoid fragmentation.")


def _format_bytes(size: int, reference: int) -> str:
    prefix = "B  "
    for new in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if reference < 768 * 1024:
            break
        prefix, size, reference = new, size // 1024, reference / 1024
    return f"{size:6d} {prefix}"


def _format_count(count: int, reference: int) -> str:
    prefix = " "
    for new in ("K", "M"):
        if reference < 750 * 1000:
            break
        prefix, count, reference = new, count // 1000, reference / 1000
    return f"{count:7d} {prefix} "
