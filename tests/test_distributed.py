"""The 2-process DDP demo: fewer all-reduces with no_sync, the same gradients as one process, processes gone."""

import multiprocessing as mp
import time

import pytest

from utils.distributed import ddp_no_sync_demo


@pytest.mark.slow
def test_ddp_no_sync_demo_on_gloo():
    start = time.monotonic()
    result = ddp_no_sync_demo(micro_batches=4)
    assert time.monotonic() - start < 60
    sync, no_sync = result["sync_every_micro_batch"], result["no_sync"]
    assert sync["allreduce_calls"] == 4 * no_sync["allreduce_calls"] and no_sync["allreduce_calls"] >= 1
    assert sync["max_abs_diff_vs_single_process"] < 1e-6
    assert no_sync["max_abs_diff_vs_single_process"] < 1e-6
    assert not mp.active_children(), "the demo's processes are cleaned up"


def test_ddp_demo_bad_arguments():
    with pytest.raises(ValueError, match="micro_batches"):
        ddp_no_sync_demo(micro_batches=0)
    with pytest.raises(ValueError, match="world_size"):
        ddp_no_sync_demo(world_size=1)


@pytest.mark.slow
def test_fsdp2_halves_every_part_per_rank():
    from utils.distributed import fsdp2_demo

    start = time.monotonic()
    result = fsdp2_demo(width=32)
    assert time.monotonic() - start < 60
    for rank in result["per_rank"]:
        for part, full in result["unsharded"].items():
            assert rank[part] * 2 == full, (part, rank[part], full)
    assert not mp.active_children()
    with pytest.raises(ValueError, match="width"):
        fsdp2_demo(width=0)
