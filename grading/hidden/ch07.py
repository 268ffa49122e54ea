"""Held-out cases for lab 07 (memory profiling). Loaded by the grader by file path; never imported by a lab.

Each entry takes the SAME arguments as the exercise's public check call and raises CheckFailed on a failure:
other statistics, models, losses, budgets, limits and failure phases than the public cases, chosen so that an
answer tuned to those cases fails.
"""

from __future__ import annotations

from utils.course.checks.ch07 import (
    LLAMA8B,
    allocator_events,
    expect_allocator_replay,
    expect_bugs_propagate,
    expect_features_fixed,
    expect_kept_loss_bytes,
    expect_micro_batch_plans,
    expect_no_leak,
    expect_run,
    step_stats,
)


def run_cases(read_run) -> None:
    """No leak (a transient that comes back), a small-pool leak while the large pool shrinks, a retry at the second
    snapshot, three snapshots only, a run whose fragmentation peaks first."""
    mib = 2**20
    flat = [step_stats(5 * 2**30 + (0 if i % 2 else 3 * mib), mib, 2 * mib, 1) for i in range(6)]
    mixed = [step_stats(700 * mib - 2 * mib * i, 5 * mib + 8192 * i, 9 * mib, 0 if i < 1 else 4) for i in range(8)]
    short = [step_stats(100 * mib, 2 * mib, 40 * mib, 0), step_stats(110 * mib, 2 * mib, mib, 0),
             step_stats(111 * mib + 7, 2 * mib, mib, 2)]
    expect_run(read_run, [flat, mixed, short])


def kept_graph_cases(prediction, reasoning, kept_loss_bytes) -> None:
    """A Llama-3-70B shape at 2,048 tokens, full multi-head attention (no GQA) at 1,024, the 8B at 8,192 tokens
    (the s^2 term dominates), and a tiny odd-sized one whose small terms matter."""
    expect_kept_loss_bytes(kept_loss_bytes, [
        ({"vocab": 128256, "d_model": 8192, "n_layer": 80, "n_head": 64, "n_kv_head": 8, "ffn_hidden": 28672}, 2048),
        ({"vocab": 32000, "d_model": 2048, "n_layer": 16, "n_head": 16, "n_kv_head": 16, "ffn_hidden": 5632}, 1024),
        (dict(LLAMA8B), 8192),
        ({"vocab": 50, "d_model": 48, "n_layer": 3, "n_head": 6, "n_kv_head": 3, "ffn_hidden": 40}, 7)])


def leak_cases(train_and_log) -> None:
    """A longer loop, a batch of one, another seed."""
    expect_no_leak(train_and_log, [(8, 20, 4, 3), (48, 3, 1, 5)])


def micro_plan_cases(plan_micro_batch) -> None:
    """Failures in the optimizer step, nothing fits, everything fits, a prime effective batch, a flaky size that is
    not the answer and one that is, a limit below the effective batch, and a bug that must propagate."""
    expect_micro_batch_plans(plan_micro_batch, [
        (5, "optimizer", 1000, 1000, frozenset()), (0, "backward", 64, 64, frozenset()),
        (500, "forward", 96, 96, frozenset()), (20, "backward", 13, 64, frozenset()),
        (12, "optimizer", 5040, 5040, frozenset({10, 8})), (90, "forward", 360, 100, frozenset({90, 72})),
        (1, "backward", 7, 3, frozenset({1}))])
    expect_bugs_propagate(plan_micro_batch)


def features_cases(train_with_features) -> None:
    """Longer loops, wider layers, one step."""
    expect_features_fixed(train_with_features, [(32, 12, 4, 3), (8, 1, 2, 9), (24, 7, 16, 5)])


def allocator_cases(replay_allocator) -> None:
    """A request of exactly 10 MiB (its own segment) and one of 10.1 MiB (rounded to 12), a 1 MiB large-pool
    remainder kept whole, an exact fit reused, merges on both sides, best fit against first fit, a segment emptied
    by its last free, and the small pool's 512-byte split."""
    expect_allocator_replay(replay_allocator, [
        allocator_events(("alloc", "a", 10), ("alloc", "b", 10.1), ("alloc", "c", 9), ("free", "a", 0),
                         ("alloc", "d", 9.5)),
        allocator_events(("alloc", "a", 4), ("alloc", "b", 6), ("alloc", "c", 4), ("alloc", "d", 5),
                         ("free", "b", 0), ("free", "a", 0), ("free", "c", 0), ("alloc", "e", 13.5),
                         ("alloc", "f", 2)),
        allocator_events(("alloc", "a", 3), ("alloc", "b", 1.25), ("alloc", "c", 7), ("alloc", "d", 2),
                         ("free", "a", 0), ("free", "c", 0), ("alloc", "e", 2.5), ("alloc", "f", 6.5),
                         ("free", "d", 0), ("free", "b", 0)),
        allocator_events(*[("alloc", f"s{i}", 0.3) for i in range(12)],
                         *[("free", f"s{i}", 0) for i in range(0, 12, 2)],
                         ("alloc", "t", 0.6), ("alloc", "u", 1 / 2048), ("free", "s1", 0))])


HIDDEN = {
    "7.1": run_cases,
    "7.2": kept_graph_cases,
    "7.3": leak_cases,
    "7.4": micro_plan_cases,
    "7.5": features_cases,
    "7.6": allocator_cases,
}
