"""utils.lessons.allocator_model against the caching allocator's documented behaviour
(c10/cuda/CUDACachingAllocator.cpp, torch 2.13), on hand-built allocation sequences: rounding, pools, split and reuse,
merging, max_split_size_mb, empty_cache, the memory fraction, expandable segments, and the statistics, summary and
snapshot built from them."""

from __future__ import annotations

import random

import pytest

from utils.lessons.allocator_model import (
    K_LARGE_BUFFER,
    K_SMALL_BUFFER,
    AllocatorOutOfMemoryError,
    CachingAllocatorModel,
)

MIB = 2**20
GIB = 2**30
T4 = 15_828_320_256


def model(**kwargs) -> CachingAllocatorModel:
    return CachingAllocatorModel(T4, **kwargs)


def test_rounding_and_segment_sizes():
    """kMinBlockSize 512; small requests (<= 1 MiB) in 2 MiB segments, 1-10 MiB in 20 MiB, above rounded to 2 MiB."""
    r, seg = CachingAllocatorModel.round_size, CachingAllocatorModel.allocation_size
    assert [r(0), r(1), r(512), r(513), r(1000)] == [512, 512, 512, 1024, 1024]
    assert seg(512) == seg(MIB) == K_SMALL_BUFFER == 2 * MIB
    assert seg(MIB + 512) == seg(10 * MIB - 512) == K_LARGE_BUFFER == 20 * MIB
    assert seg(10 * MIB) == 10 * MIB and seg(12 * MIB + 1) == 14 * MIB
    m = model()
    m.malloc(1)
    assert (m.allocated, m.reserved) == (512, 2 * MIB)
    stats = m.memory_stats()
    assert stats["requested_bytes.all.current"] == 1 and stats["segment.small_pool.current"] == 1
    m.malloc(3 * MIB)
    assert m.reserved == 22 * MIB and m.memory_stats()["segment.large_pool.current"] == 1
    m.malloc(12 * MIB + 1)  # fits in the 17 MiB left of the 20 MiB segment: split from it
    assert m.reserved == 22 * MIB and m.allocated == 512 + 3 * MIB + 12 * MIB + 512
    m.malloc(12 * MIB + 1)  # no cached block fits: a segment of 14 MiB (>= 10 MiB: rounded up to 2 MiB)
    assert m.reserved == 36 * MIB and m.memory_stats()["segment.large_pool.current"] == 2


def test_small_pool_packs_a_segment_then_opens_another():
    m = model()
    handles = [m.malloc(512 * 1024) for _ in range(4)]
    assert m.reserved == 2 * MIB  # four 512 KiB blocks split one 2 MiB segment
    assert len({h // (2 * MIB) for h in handles}) == 1
    m.malloc(512 * 1024)
    assert m.reserved == 4 * MIB and m.memory_stats()["segment.all.current"] == 2


def test_split_rules_of_the_two_pools():
    """Small pool: split when >= 512 bytes remain; large pool: only when more than 1 MiB (kSmallSize) remains."""
    m = model()
    m.malloc(19 * MIB)  # 19 MiB >= 10 MiB: a 20 MiB segment (rounded to 2 MiB); 1 MiB left: not split
    assert m.allocated == 20 * MIB and m.memory_stats()["requested_bytes.all.current"] == 19 * MIB
    m.malloc(8 * MIB)  # a 20 MiB segment; 12 MiB left: split
    assert m.allocated == 28 * MIB and m.memory_stats()["inactive_split_bytes.all.current"] == 12 * MIB
    small = model()
    small.malloc(2 * MIB - 1024)  # too large for the small pool (> 1 MiB): large pool
    small.malloc(MIB - 512)  # small pool: 1 MiB + 512 bytes left in its 2 MiB segment: split
    assert small.memory_stats()["inactive_split_bytes.small_pool.current"] == MIB + 512


def test_freed_block_is_reused_and_the_cache_keeps_it():
    m = model()
    a = m.malloc(8 * MIB)
    m.free(a)
    assert (m.allocated, m.reserved) == (0, 20 * MIB)  # freed, still cached
    b = m.malloc(8 * MIB)
    assert b == a and m.reserved == 20 * MIB and m.memory_stats()["num_device_alloc"] == 1


def test_best_fit_takes_the_smallest_free_block_that_fits():
    m = model()
    big, keep1, small, keep2 = m.malloc(30 * MIB), m.malloc(30 * MIB), m.malloc(12 * MIB), m.malloc(30 * MIB)
    m.free(big)
    m.free(small)
    assert m.malloc(11 * MIB) == small  # 12 MiB block, not the 30 MiB one
    assert m.malloc(20 * MIB) == big
    del keep1, keep2


def test_free_neighbours_merge_and_empty_cache_returns_only_whole_segments():
    m = model()
    a, b, c = m.malloc(4 * MIB), m.malloc(4 * MIB), m.malloc(4 * MIB)  # one 20 MiB segment, split four ways
    assert m.reserved == 20 * MIB
    m.free(a)
    m.free(b)  # a and b merge into one 8 MiB free block
    stats = m.memory_stats()
    assert stats["inactive_split.all.current"] == 2 and stats["inactive_split_bytes.all.current"] == 16 * MIB
    m.empty_cache()
    assert m.reserved == 20 * MIB  # c is alive: its segment stays, free pieces and all
    (segment,) = m.snapshot()
    assert [blk["size"] // MIB for blk in segment["blocks"]] == [8, 4, 8]
    assert [blk["state"] for blk in segment["blocks"]] == ["inactive", "active_allocated", "inactive"]
    m.free(c)  # the whole segment is one free block again
    assert m.memory_stats()["inactive_split.all.current"] == 0
    m.empty_cache()
    assert m.reserved == 0 and m.memory_stats()["num_device_free"] == 1


def fragmentation(m: CachingAllocatorModel, pairs: int = 40, growing: int = 10) -> list[int]:
    """Chapter 07's fragmentation child: 8 MiB transients with 1.5 MiB survivors between them, then growing
    requests of 12, 14, ... MiB; returns the survivors' handles."""
    transients, survivors = [], []
    for _ in range(pairs):
        transients.append(m.malloc(8 * MIB))
        survivors.append(m.malloc(3 * MIB // 2))
    for h in transients:
        m.free(h)
    for j in range(growing):
        m.free(m.malloc((12 + 2 * j) * MIB))
    return survivors


def test_fragmentation_default_keeps_every_segment_with_a_survivor():
    m = model()
    survivors = fragmentation(m)
    stats = m.memory_stats()
    # two pairs per 20 MiB segment (8 + 1.5 + 8 + 2.5: the last 2.5 MiB block is not split, 1 MiB would remain)
    assert stats["allocated_bytes.all.current"] == 80 * MIB
    assert stats["reserved_bytes.all.peak"] == 400 * MIB + sum((12 + 2 * j) * MIB for j in range(10))
    m.empty_cache()
    assert m.reserved == 400 * MIB and m.memory_stats()["inactive_split_bytes.all.current"] == 320 * MIB
    for h in survivors:
        m.free(h)
    m.empty_cache()
    assert m.reserved == 0


def test_expandable_segments_grow_one_segment_and_unmap_free_pages():
    m = model(expandable_segments=True)
    survivors = fragmentation(m)
    stats = m.memory_stats()
    assert stats["allocated_bytes.all.current"] == 60 * MIB  # split at any 512 bytes: survivors take 1.5 MiB
    assert stats["reserved_bytes.all.peak"] < 610 * MIB  # the growing requests reuse the freed end
    assert stats["segment.all.current"] == 0 and stats["inactive_split_bytes.all.current"] == 0  # as the source
    segments = m.snapshot()
    assert len(segments) == 1 and segments[0]["is_expandable"] and segments[0]["total_size"] == m.reserved
    m.empty_cache()  # unmaps the 20 MiB pages without a live block
    assert m.reserved % K_LARGE_BUFFER == 0 and m.reserved < 400 * MIB
    for h in survivors:
        m.free(h)
    m.empty_cache()
    assert m.reserved == 0 and m.snapshot() == []


def test_expandable_segment_grows_at_its_end():
    m = model(expandable_segments=True)
    a = m.malloc(15 * MIB)
    assert m.reserved == 20 * MIB  # one large page
    b = m.malloc(15 * MIB)  # 5 MiB free at the end + one more page: the same segment, contiguous
    assert b == a + 15 * MIB and m.reserved == 40 * MIB and len(m.snapshot()) == 1


def test_max_split_size_keeps_oversize_blocks_whole():
    """A request below max_split_size never takes an oversize cached block; one above takes a block at most
    20 MiB larger, unsplit."""
    plain, capped = model(), model(max_split_size_mb=64)
    for m in (plain, capped):
        m.free(m.malloc(100 * MIB))
    plain.malloc(30 * MIB)
    capped.malloc(30 * MIB)
    assert plain.reserved == 100 * MIB  # split the cached 100 MiB block
    assert capped.reserved == 130 * MIB  # a new segment: the oversize block is not split
    stats = capped.memory_stats()
    assert stats["max_split_size"] == 64 * MIB and stats["oversize_segments.current"] == 1
    assert plain.memory_stats()["max_split_size"] == -1
    h = capped.malloc(90 * MIB)  # >= max_split: takes the 100 MiB block (within 20 MiB), whole
    assert capped.block_size(h) == 100 * MIB and capped.memory_stats()["oversize_allocations.current"] == 1
    capped.free(h)
    capped.malloc(70 * MIB)  # the 100 MiB block is 30 MiB too large: a new 70 MiB segment
    assert capped.reserved == 200 * MIB


def test_oversize_blocks_are_released_before_a_retry():
    """Under a cap, a cached oversize block that cannot serve a request (20 MiB or more too large) goes back to the
    driver to make room, with no retry counted (release_available_cached_blocks); without max_split_size the
    same block is split; and when nothing cached fits, the allocator frees every cached segment and retries."""
    capped = CachingAllocatorModel(GIB, max_split_size_mb=64, fraction=200 * MIB / GIB)
    capped.free(capped.malloc(130 * MIB))
    capped.malloc(100 * MIB)
    assert capped.reserved == 100 * MIB and capped.memory_stats()["num_alloc_retries"] == 0
    assert capped.memory_stats()["num_device_free"] == 1
    split = CachingAllocatorModel(GIB, fraction=200 * MIB / GIB)
    split.free(split.malloc(130 * MIB))
    split.malloc(100 * MIB)
    assert split.reserved == 130 * MIB and split.memory_stats()["inactive_split_bytes.all.current"] == 30 * MIB
    plain = CachingAllocatorModel(GIB, fraction=150 * MIB / GIB)
    plain.free(plain.malloc(100 * MIB))
    plain.malloc(120 * MIB)
    assert plain.reserved == 120 * MIB and plain.memory_stats()["num_alloc_retries"] == 1


def test_garbage_collection_releases_old_cached_segments_under_a_fraction():
    """garbage_collection_threshold:0.5 with 1 GiB allowed: above 512 MiB reserved, whole cached segments go back,
    the oldest first, before a new segment is taken; without a fraction it never acts."""
    for fraction, expected in ((1.0, None), (0.999, 1)):
        m = CachingAllocatorModel(GIB, garbage_collection_threshold=0.5)
        if fraction < 1:
            m.set_memory_fraction(fraction)
        old = [m.malloc(100 * MIB) for _ in range(5)]  # 500 MiB
        for h in old:
            m.free(h)  # five cached 100 MiB segments
        for _ in range(3):
            m.free(m.malloc(100 * MIB))  # reuse one of them: it is young again
        m.malloc(200 * MIB)  # no cached block fits: 500 MiB reserved < 511 MiB: no collection yet
        freed_before = m.memory_stats()["num_device_free"]
        m.malloc(300 * MIB)  # 700 MiB reserved > threshold: collection first
        freed = m.memory_stats()["num_device_free"] - freed_before
        if expected is None:
            assert freed == 0 and m.reserved == 1000 * MIB
        else:
            assert freed >= expected and m.reserved < 1000 * MIB


def test_memory_fraction_caps_reserved_memory():
    m = CachingAllocatorModel(GIB, fraction=0.25)
    m.malloc(200 * MIB)
    with pytest.raises(AllocatorOutOfMemoryError, match=r"Tried to allocate 100\.00 MiB.*256\.00 MiB allowed"):
        m.malloc(100 * MIB)
    stats = m.memory_stats()
    assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1 and m.reserved == 200 * MIB
    m.set_memory_fraction(1.0)
    m.malloc(100 * MIB)
    assert m.reserved == 300 * MIB
    assert "CUDA OOMs: 1" in m.summary() and "cudaMalloc retries: 1" in m.summary()


def test_device_capacity_less_the_context_is_the_limit():
    m = CachingAllocatorModel(GIB, context_bytes=300 * MIB)
    m.malloc(700 * MIB)
    with pytest.raises(AllocatorOutOfMemoryError, match="total capacity of 1024.00 MiB"):
        m.malloc(30 * MIB)


def test_stats_peaks_summary_and_reset():
    m = model()
    h = m.malloc(64 * MIB)
    m.free(h)
    stats = m.memory_stats()
    assert stats["allocated_bytes.all.peak"] == 64 * MIB and stats["allocated_bytes.all.current"] == 0
    assert stats["allocated_bytes.large_pool.freed"] == 64 * MIB and stats["reserved_bytes.all.current"] == 64 * MIB
    assert {f"{n}.{p}.{k}" for n in ("active", "active_bytes", "requested_bytes") for p in ("all", "small_pool")
            for k in ("current", "peak", "allocated", "freed")} <= set(stats)
    m.reset_peak_stats()
    assert m.memory_stats()["allocated_bytes.all.peak"] == 0
    m.reset_accumulated_stats()
    assert m.memory_stats()["allocated_bytes.all.freed"] == 0
    text = m.summary()
    assert "PyTorch CUDA memory summary" in text and "GPU reserved memory" in text and "from small pool" in text
    assert "from small pool" not in m.summary(abbreviated=True)
    assert all(len(line) == 77 for line in text.splitlines())


def test_trace_records_allocator_events():
    m = model()
    m.record()
    m.free(m.malloc(4 * MIB))
    m.empty_cache()
    assert [e["action"] for e in m.trace] == ["segment_alloc", "alloc", "free_completed", "segment_free"]
    m.record(False)
    assert m.trace is None


@pytest.mark.parametrize("expandable", [False, True])
def test_random_sequences_keep_the_books(expandable: bool):
    """Allocated is the sum of live blocks, reserved the sum of segments; blocks tile their segments; and once
    everything is freed, empty_cache returns every byte."""
    rng = random.Random(7 + expandable)
    m = model(expandable_segments=expandable, max_split_size_mb=None if expandable else 40)
    live: dict[int, int] = {}
    for _ in range(600):
        if live and rng.random() < 0.45:
            h = rng.choice(list(live))
            m.free(h)
            del live[h]
        else:
            size = rng.choice([rng.randint(1, 4096), rng.randint(1, MIB), rng.randint(MIB, 12 * MIB),
                               rng.randint(10 * MIB, 64 * MIB)])
            h = m.malloc(size)
            assert h not in live
            live[h] = size
        if rng.random() < 0.05:
            m.empty_cache()
        segments = m.snapshot()
        blocks = [b for s in segments for b in s["blocks"]]
        assert m.allocated == sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        assert m.allocated == sum(m.block_size(h) for h in live)
        assert m.reserved == sum(s["total_size"] for s in segments)
        for s in segments:
            ends = [b["address"] + b["size"] for b in s["blocks"]]
            assert [b["address"] for b in s["blocks"][1:]] == ends[:-1]
        assert m.memory_stats()["requested_bytes.all.current"] == sum(live.values())
    for h in live:
        m.free(h)
    m.empty_cache()
    stats = m.memory_stats()
    assert m.reserved == 0 and stats["inactive_split_bytes.all.current"] == 0 and stats["active.all.current"] == 0


def test_settings_strings():
    env = CachingAllocatorModel.alloc_conf_from_env
    assert env({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == "expandable_segments:True"
    # torch 2.13 reads the first variable set of CUDA, HIP, generic (c10/cuda/CUDAAllocatorConfig.h), even if empty
    assert env({"PYTORCH_CUDA_ALLOC_CONF": "", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == ""
    assert env({}) == ""
    from utils.lessons.env import allocator_settings  # the course's reader, checked against the installed torch binary

    for variables in ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_CUDA_ALLOC_CONF": "x"},
                      {"PYTORCH_HIP_ALLOC_CONF": "y", "PYTORCH_ALLOC_CONF": "z"}, {"PYTORCH_ALLOC_CONF": "w"}):
        assert env(variables) == allocator_settings(variables).value
    parse = CachingAllocatorModel.parse_alloc_conf
    assert parse("expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,pinned_x:1") == {
        "expandable_segments": True, "max_split_size_mb": 128, "garbage_collection_threshold": 0.6}
    m = CachingAllocatorModel.from_conf(GIB, "expandable_segments:True")
    assert m.expandable_segments and m.max_split_size == 2**64 - 1


@pytest.mark.parametrize(("call", "name", "error"), [
    (lambda: CachingAllocatorModel(0), "capacity", ValueError),
    (lambda: CachingAllocatorModel(1.5e9), "capacity", TypeError),
    (lambda: CachingAllocatorModel(GIB, max_split_size_mb=19), "max_split_size_mb", ValueError),
    (lambda: CachingAllocatorModel(GIB, max_split_size_mb="64"), "max_split_size_mb", TypeError),
    (lambda: CachingAllocatorModel(GIB, expandable_segments="yes"), "expandable_segments", TypeError),
    (lambda: CachingAllocatorModel(GIB, fraction=1.5), "fraction", ValueError),
    (lambda: CachingAllocatorModel(GIB, fraction="half"), "fraction", TypeError),
    (lambda: CachingAllocatorModel(GIB, context_bytes=GIB), "context_bytes", ValueError),
    (lambda: CachingAllocatorModel(GIB, garbage_collection_threshold=1.0), "garbage_collection_threshold", ValueError),
    (lambda: CachingAllocatorModel(GIB, garbage_collection_threshold="0.5"), "garbage_collection_threshold",
     TypeError),
    (lambda: model().malloc(0), "size", ValueError),
    (lambda: model().malloc(2.0), "size", TypeError),
    (lambda: model().free(12345), "handle", ValueError),
    (lambda: model().free(None), "handle", TypeError),
    (lambda: model().set_memory_fraction(-0.1), "fraction", ValueError),
    (lambda: model().summary(abbreviated=1), "abbreviated", TypeError),
    (lambda: model().record("yes"), "enabled", TypeError),
    (lambda: CachingAllocatorModel.parse_alloc_conf("max_split_size_mb:lots"), "conf", ValueError),
    (lambda: CachingAllocatorModel.parse_alloc_conf(None), "conf", TypeError),
    (lambda: CachingAllocatorModel.alloc_conf_from_env("PYTORCH_ALLOC_CONF"), "environ", TypeError),
])
def test_bad_input_is_named(call, name, error):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(name) or f"{name}:" in str(info.value)
