"""FSDP2 measured where it matters: each rank's peak DURING forward and backward, not only the shards at rest.

At rest, FSDP2 (`torch.distributed.fsdp.fully_shard`) keeps 1/N of every parameter, gradient and optimizer state
per rank, true by construction. During the step each rank all-gathers one block's full parameters before the
block computes (and, with prefetching, the next block's too), and in backward it holds a block's unsharded
gradients until they are reduce-scattered. `fsdp_peaks` runs the same stack of MLP blocks:

- in one process without sharding (the DDP-like baseline: everything replicated), and
- with FSDP2 on `world_size` gloo processes (this machine's CPU),

and measures each rank's peak bytes in forward and in backward with torch's `FSDPMemTracker` (tensor bytes by
category: sharded and unsharded parameters, all-gather buffers, gradients, activations, optimizer states).
Every process is joined (killed after `timeout_s`), and arguments are validated before any process starts.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from utils.validate import check_int, check_number

__all__ = ["blocks_model", "fsdp_peaks"]


def blocks_model(width: int, depth: int) -> nn.Sequential:
    """`depth` MLP blocks (width -> 4 width -> width), the transformer's MLP without attention."""
    check_int("width", width, minimum=1)
    check_int("depth", depth, minimum=1)
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
                           for _ in range(depth)))


def _phase_peaks(tracker: Any) -> dict[str, dict[str, int]]:
    """The root module's peak forward and peak backward snapshots, {phase: {category: bytes}}, over devices."""
    out: dict[str, dict[str, int]] = {}
    stats = tracker.memory_tracking
    root = next(iter(stats.values()))  # the first module entered: the root
    phases = ((("Peak Forward", "Peak-Forward"), "forward"), (("Peak Backward", "Peak-Backward"), "backward"))
    for keys, phase in phases:
        by_name = {getattr(s, "value", str(s)): v for s, v in root.snapshots.items()}
        snaps = next((by_name[k] for k in keys if k in by_name), [])
        best: dict[str, int] = {}
        for snap in snaps:
            merged: dict[str, int] = {}
            for per_dev in snap.values():
                for cat, nbytes in per_dev.items():
                    name = getattr(cat, "value", str(cat))
                    merged[name] = merged.get(name, 0) + int(nbytes)
            if merged.get("Total", 0) >= best.get("Total", 0):
                best = merged
        out[phase] = best
    return out


def _worker(rank: int, world_size: int, port: int, width: int, depth: int, batch: int, out: str) -> None:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import fully_shard

    from utils.lessons.distributed import cpu_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        model = blocks_model(width, depth)
        mesh = cpu_mesh()  # gloo processes on the CPU, as the chapter says, on any host (no default CUDA mesh)
        for block in model:
            fully_shard(block, mesh=mesh)  # one all-gather unit per block
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width, generator=torch.Generator().manual_seed(rank))
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((x,))
        with tracker:
            for i in range(2):  # the first step creates the optimizer's states
                if i:
                    tracker.reset_mod_stats()
                model(x).pow(2).mean().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        peaks = _phase_peaks(tracker)
        local = {"parameters": sum(p.to_local().numel() * p.element_size() for p in model.parameters()),
                 "optimizer states": sum(v.to_local().numel() * v.element_size() for s in opt.state.values()
                                         for k, v in s.items() if k != "step" and hasattr(v, "to_local"))}
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, {"peaks": peaks, "at_rest": local})
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _single_process(width: int, depth: int, batch: int) -> dict[str, Any]:
    """The same model and step without sharding: MemTracker's peaks in forward and backward."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model = blocks_model(width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(0))
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for i in range(2):
            if i:
                tracker.reset_mod_stats()
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    peaks = _phase_peaks(tracker)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"peaks": peaks, "at_rest": {"parameters": params, "optimizer states": 2 * params}}


def fsdp_peaks(width: int = 64, depth: int = 4, batch: int = 8, world_size: int = 2,
               timeout_s: float = 60) -> dict[str, Any]:
    """Per-rank peak bytes in forward and backward under FSDP2 over `world_size` gloo processes, beside one
    unsharded process. Returns {"single": {...}, "ranks": [{...}, ...], "block_bytes": one block's parameter
    bytes}; each entry has "peaks" {"forward"|"backward": {category: bytes, "Total": bytes}} and "at_rest"."""
    from utils.lessons.distributed import free_port

    check_int("width", width, minimum=1, maximum=4096)
    check_int("depth", depth, minimum=1, maximum=64)
    check_int("batch", batch, minimum=1, maximum=4096)
    check_int("world_size", world_size, minimum=2, maximum=8)
    check_number("timeout_s", timeout_s, positive=True, maximum=3600)
    print(f"Measuring FSDP2's peaks by category: one unsharded process, then {world_size} worker processes "
          f"sharding {depth} blocks over gloo on the CPU (starting the workers takes most of the time).", flush=True)
    started = time.monotonic()

    def stage(text: str) -> None:
        # one line per stage, kept in the output as it is printed (a progress bar's widget stays frozen in a
        # notebook's saved outputs and on the website)
        print(f"  {text} ({time.monotonic() - started:.0f} s)", flush=True)

    single = _single_process(width, depth, batch)
    stage("1/3 the unsharded process measured")
    ctx = mp.get_context("spawn")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fsdp-peaks-") as tmp:
        out = str(Path(tmp) / "result.json")
        procs = [ctx.Process(target=_worker, args=(r, world_size, port, width, depth, batch, out))
                 for r in range(world_size)]
        try:
            for p in procs:
                p.start()
            stage(f"2/3 {world_size} workers started")
            deadline = time.monotonic() + timeout_s
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
            stage(f"3/3 {world_size} workers joined")
        finally:
            alive = [p for p in procs if p.is_alive()]
            for p in alive:
                p.kill()
            for p in procs:
                if p.pid is not None:
                    p.join()
        if alive:
            raise RuntimeError(f"the FSDP2 demo did not finish within {timeout_s:g} s; its processes were killed")
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"an FSDP2 worker failed (exit codes {[p.exitcode for p in procs]})")
        ranks = json.loads(Path(out).read_text())
    block = sum(p.numel() * p.element_size() for p in blocks_model(width, 1).parameters())
    return {"single": single, "ranks": ranks, "block_bytes": block, "world_size": world_size}
