"""Worker functions for the multi-process demos (spawned processes can only run importable functions).

`fsdp2_demo` shards a small transformer-style MLP with FSDP2 (`fully_shard`) over 2 gloo processes and measures,
per rank, the bytes of the local shards of parameters, gradients and AdamW states after a step.

`ddp_no_sync_demo` trains one accumulation step with DistributedDataParallel on the gloo backend (CPU, 2 processes
on this machine), counting gradient all-reduces with a communication hook, with and without `no_sync()`, and
compares the result with a single process computing the whole batch.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import tempfile
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the processes' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


def _data(world_size: int, micro_batches: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    n = world_size * micro_batches * micro_batch
    return torch.randn(n, 16, generator=g), torch.randn(n, 4, generator=g)


def _ddp_worker(rank: int, world_size: int, port: int, micro_batches: int, micro_batch: int, out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        x, y = _data(world_size, micro_batches, micro_batch)
        shard = slice(rank * micro_batches * micro_batch, (rank + 1) * micro_batches * micro_batch)
        xs, ys = x[shard].chunk(micro_batches), y[shard].chunk(micro_batches)
        results: dict[str, Any] = {}
        for use_no_sync in (False, True):
            model = DDP(_model())
            calls = {"allreduce": 0}

            def counting_allreduce(state, bucket):  # no annotations: DDP checks them, and they would be strings
                state["allreduce"] += 1
                tensor = bucket.buffer().div_(world_size)
                return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])

            model.register_comm_hook(calls, counting_allreduce)
            for i in range(micro_batches):
                last = i == micro_batches - 1
                context = model.no_sync() if use_no_sync and not last else nullcontext()
                with context:
                    loss = nn.functional.mse_loss(model(xs[i]), ys[i]) / micro_batches
                    loss.backward()
            grads = [p.grad.clone() for p in model.parameters()]
            results["no_sync" if use_no_sync else "sync_every_micro_batch"] = {
                "allreduce_calls": calls["allreduce"], "grads": [g.flatten().tolist() for g in grads]}
        if rank == 0:
            reference = _model()
            nn.functional.mse_loss(reference(x), y).backward()
            ref = torch.cat([p.grad.flatten() for p in reference.parameters()])
            summary = {}
            for key, value in results.items():
                got = torch.cat([torch.tensor(g) for g in value["grads"]])
                summary[key] = {"allreduce_calls": value["allreduce_calls"],
                                "max_abs_diff_vs_single_process": (got - ref).abs().max().item()}
            Path(out).write_text(json.dumps(summary))
        dist.barrier()  # leave together: a rank exiting while its peer still works can abort the peer
    finally:
        dist.destroy_process_group()


def _local_bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t  # FSDP2 parameters are DTensors
        total += local.numel() * local.element_size()
    return total


def _fsdp2_worker(rank: int, world_size: int, port: int, width: int, out: str) -> None:
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        blocks = [nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)) for _ in range(4)]
        model = nn.Sequential(*blocks)
        full = {"parameters": sum(p.numel() * p.element_size() for p in model.parameters())}
        for block in blocks:
            fully_shard(block)  # each block's parameters are split across the ranks
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(8, width, generator=torch.Generator().manual_seed(rank))
        model(x).pow(2).mean().backward()
        opt.step()
        states = [v for s in opt.state.values() for k, v in s.items() if k != "step" and torch.is_tensor(v)]
        local = {"parameters": _local_bytes(model.parameters()),
                 "gradients": _local_bytes(p.grad for p in model.parameters() if p.grad is not None),
                 "optimizer states": _local_bytes(states)}
        full |= {"gradients": full["parameters"], "optimizer states": 2 * full["parameters"]}
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, local)
        if rank == 0:
            Path(out).write_text(json.dumps({"unsharded": full, "per_rank": gathered}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_workers(target: Any, world_size: int, args: tuple, timeout_s: float) -> dict[str, Any]:
    """Start `world_size` spawned processes running target(rank, world_size, port, *args, out), wait, clean up."""
    ctx = mp.get_context("spawn")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dist-demo-") as tmp:
        out = str(Path(tmp) / "result.json")
        procs = [ctx.Process(target=target, args=(r, world_size, port, *args, out)) for r in range(world_size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout_s)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
            p.join()
        if alive:
            raise RuntimeError(f"the distributed demo did not finish within {timeout_s:g} s; its processes were killed")
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"a worker failed (exit codes {[p.exitcode for p in procs]})")
        return json.loads(Path(out).read_text())


def fsdp2_demo(width: int = 64, world_size: int = 2, timeout_s: float = 90) -> dict[str, Any]:
    """Per-rank bytes of parameters, gradients and optimizer states under FSDP2 on `world_size` gloo processes,
    beside the unsharded sizes."""
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an int of at least 2, got {world_size!r}")
    return _run_workers(_fsdp2_worker, world_size, (width,), timeout_s)


def ddp_no_sync_demo(micro_batches: int = 4, micro_batch: int = 8, world_size: int = 2, timeout_s: float = 90
                     ) -> dict[str, dict[str, float]]:
    """Run the 2-process gloo DDP accumulation demo; return all-reduce counts and the gradient difference from
    a single process on the whole batch, for syncing every micro-batch and for `no_sync()`. Processes that
    outlive `timeout_s` are killed (RuntimeError)."""
    for name, value in (("micro_batches", micro_batches), ("micro_batch", micro_batch), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if world_size < 2:
        raise ValueError(f"world_size must be at least 2 for a distributed demo, got {world_size}")
    return _run_workers(_ddp_worker, world_size, (micro_batches, micro_batch), timeout_s)
