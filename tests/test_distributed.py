"""Distributed plumbing: launch_script starts, joins and cleans up; chapter 06's workers (written in the notebook
with %%writefile) run through it and give the lesson's results; the FSDP2 demo chapter 09 uses still works."""

import multiprocessing as mp
import re
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from utils.lessons.distributed import launch_script

ROOT = Path(__file__).resolve().parent.parent
CH06 = ROOT / "notebooks" / "06_gradient_accumulation.ipynb"


def notebook_worker(name: str, tmp_path: Path) -> Path:
    """The source of the notebook cell that writes `name` with %%writefile, saved as a script."""
    nb = nbformat.read(CH06, as_version=4)
    for cell in nb.cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile") and first.endswith(name):
            path = tmp_path / name
            path.write_text(body)
            return path
    raise AssertionError(f"chapter 06 has no %%writefile cell for {name}")


@pytest.mark.slow
def test_notebook_ddp_worker_counts_allreduces(tmp_path):
    start = time.monotonic()
    result = launch_script(notebook_worker("ddp_no_sync_worker.py", tmp_path), world_size=2, timeout_s=120)
    assert time.monotonic() - start < 120
    sync, no_sync = result["sync every micro-batch"], result["no_sync"]
    assert sync["allreduce_calls"] == 4 * no_sync["allreduce_calls"] and no_sync["allreduce_calls"] == 1
    assert max(sync["max_abs_diff_vs_one_process"], no_sync["max_abs_diff_vs_one_process"]) < 1e-6


@pytest.mark.slow
def test_notebook_fsdp_worker_keeps_unsharded_gradients(tmp_path):
    result = launch_script(notebook_worker("fsdp_no_sync_worker.py", tmp_path), world_size=2, timeout_s=120)
    full = result["full_gradient_bytes"]
    assert all(h["unsharded"] == full and h["sharded"] == 0 for h in result["no sync until the last"][:-1])
    assert result["no sync until the last"][-1] == {"sharded": full // 2, "unsharded": 0}
    assert all(h == {"sharded": full // 2, "unsharded": 0} for h in result["reduce-scatter every micro-batch"])


def test_notebook_has_no_utils_ddp_demo():
    source = "\n".join(c.source for c in nbformat.read(CH06, as_version=4).cells)
    assert "ddp_no_sync_demo" not in source and "register_comm_hook" in source and "no_sync()" in source
    assert re.search(r"torch\.roll\(.*\* 0", source) is None  # the dead expression is gone


WORKER = textwrap.dedent("""
    import json, os, sys, time
    import torch.distributed as dist
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "fail" and rank == 1:
        raise SystemExit("rank 1 gives up")
    if mode == "hang" and rank == 1:
        time.sleep(600)
    if rank == 0 and mode in ("ok", "teardown_hang"):
        with open(os.environ["COURSE_DIST_OUT"], "w") as f:
            json.dump({"world": dist.get_world_size(), "port": os.environ["MASTER_PORT"]}, f)
    if mode in ("ok", "teardown_hang"):
        dist.barrier()
    if mode == "teardown_hang" and rank == 1:
        time.sleep(600)  # as destroy_process_group hangs once rank 0's TCPStore is gone (pytorch/pytorch#75097)
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_launch_script_runs_joins_and_reports(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    assert launch_script(script, world_size=2, timeout_s=60, args=("ok",))["world"] == 2
    with pytest.raises(RuntimeError, match="rank 1 exited"):
        launch_script(script, world_size=2, timeout_s=60, args=("fail",))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish within"):
        launch_script(script, world_size=2, timeout_s=8, args=("hang",))
    assert time.monotonic() - start < 30
    # rank 0 wrote the result and left, rank 1 hangs in its teardown: the result comes back, the peer is stopped
    # (under load this killed chapter 06's DDP run at its 120 s timeout, twice)
    assert launch_script(script, world_size=2, timeout_s=300, args=("teardown_hang",))["world"] == 2


def test_launch_script_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="script"):
        launch_script(tmp_path / "missing.py")
    script = tmp_path / "w.py"
    script.write_text("pass\n")
    with pytest.raises(ValueError, match="world_size"):
        launch_script(script, world_size=1)
    with pytest.raises(TypeError, match="world_size"):
        launch_script(script, world_size=2.0)
    with pytest.raises(ValueError, match="timeout_s"):
        launch_script(script, timeout_s=0)
    with pytest.raises(TypeError, match="args"):
        launch_script(script, args=["x"])
    with pytest.raises(TypeError, match="env"):
        launch_script(script, env={"A": 1})


def test_launch_script_without_result_says_so(tmp_path):
    script = tmp_path / "w.py"
    script.write_text("pass\n")
    with pytest.raises(RuntimeError, match="wrote no result"):
        launch_script(script, world_size=2, timeout_s=60)


@pytest.mark.slow
def test_fsdp2_halves_every_part_per_rank():
    from utils.lessons.distributed import fsdp2_demo

    start = time.monotonic()
    result = fsdp2_demo(width=32)
    assert time.monotonic() - start < 60
    for rank in result["per_rank"]:
        for part, full in result["unsharded"].items():
            assert rank[part] * 2 == full, (part, rank[part], full)
    assert not mp.active_children()
    with pytest.raises(ValueError, match="width"):
        fsdp2_demo(width=0)


def test_a_failed_rank_is_reported_at_once_not_as_a_timeout(tmp_path):
    """Rank 0 fails while rank 1 would wait for it: the error names rank 0 within seconds, not the deadline."""
    import time

    from utils.lessons.distributed import launch_script

    script = tmp_path / "worker.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '0':\n    sys.exit('rank 0 broke')\n"
                      "time.sleep(60)\n")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 0 exited with code 1"):
        launch_script(script, timeout_s=50)
    assert time.monotonic() - start < 30


def test_a_port_taken_meanwhile_is_retried_on_another(tmp_path):
    from utils.lessons.distributed import launch_script

    marker = tmp_path / "first-try-done"
    script = tmp_path / "worker.py"
    script.write_text(
        "import json, os, pathlib, sys\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if os.environ['RANK'] == '0' and not marker.exists():\n"
        "    marker.write_text('x')\n"
        "    sys.exit('RuntimeError: The server socket has failed to listen on any local network address. "
        "Address already in use')\n"
        "if os.environ['RANK'] == '0':\n"
        "    pathlib.Path(os.environ['COURSE_DIST_OUT']).write_text(json.dumps({'port': os.environ['MASTER_PORT']}))\n")
    assert "port" in launch_script(script, timeout_s=60)
