"""Worker functions for the multi-process demos (spawned processes can only run importable functions).

`fsdp2_demo` shards a small transformer-style MLP with FSDP2 (`fully_shard`) over 2 gloo processes and measures,
per rank, the bytes of the local shards of parameters, gradients and AdamW states after a step.

`launch_script` is launching plumbing only: it runs a worker script (for example one a notebook cell wrote with
`%%writefile`, so the lesson's code stands in the notebook) on `world_size` local processes with the usual
torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK only where each rank has a
GPU of its own), waits for every process
under a time limit, kills the group of any that outlives it, and returns the JSON that rank 0 wrote to the path in
the environment variable COURSE_DIST_OUT. Chapter 06's DDP `no_sync` worker and FSDP2 worker are written that way.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from utils.validate import check_int, check_number

OUT_ENV = "COURSE_DIST_OUT"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the processes' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


def cpu_mesh() -> Any:
    """A 1-D DeviceMesh on the CPU over every rank of the initialised (gloo) process group, to pass as
    `fully_shard(module, mesh=cpu_mesh())`.

    Without a mesh, FSDP2 builds one on `torch._C._get_accelerator()` (torch 2.13:
    torch/distributed/fsdp/_fully_shard/_fsdp_init.py, `_init_default_mesh`), and DeviceMesh then sets each rank's
    device from LOCAL_RANK or rank % device count (torch/distributed/device_mesh.py,
    `_setup_world_group_and_device`): on a one-GPU host rank 1 asks for cuda:1 or both ranks share cuda:0, and on
    MPS it fails. The course's demos run their ranks as CPU processes, so they say so with this mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RuntimeError("cpu_mesh needs an initialised process group: dist.init_process_group('gloo', ...) first")
    return init_device_mesh("cpu", (dist.get_world_size(),))


def accelerator_local_rank(rank: int, world_size: int) -> str | None:
    """LOCAL_RANK to export to a local worker: its rank when every rank can have a CUDA GPU of its own here, else
    None (no LOCAL_RANK: a launcher must not name a device that does not exist, e.g. cuda:1 on a one-GPU host).
    Counts devices without creating a CUDA context (torch.cuda.device_count)."""
    check_int("rank", rank, minimum=0)
    check_int("world_size", world_size, minimum=1)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size ({world_size}), got {rank}")
    return str(rank) if torch.cuda.is_available() and world_size <= torch.cuda.device_count() else None


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
        mesh = cpu_mesh()  # the ranks are CPU processes, whatever accelerator this host has
        for block in blocks:
            fully_shard(block, mesh=mesh)  # each block's parameters are split across the ranks
        fully_shard(model, mesh=mesh)
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
    # Every argument is checked before a worker starts: a bad timeout must never leave processes behind.
    check_int("width", width, minimum=1)
    check_int("world_size", world_size, minimum=2, maximum=8)
    check_number("timeout_s", timeout_s, positive=True)
    return _run_workers(_fsdp2_worker, world_size, (width,), timeout_s)


def _stop(proc: subprocess.Popen) -> None:
    """Kill a worker and everything it started (it runs in its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def launch_script(script: str | os.PathLike, *, world_size: int = 2, timeout_s: float = 60,
                  args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python script *args` on `world_size` local processes as one torch.distributed job; return the JSON
    that rank 0 wrote to os.environ["COURSE_DIST_OUT"].

    Each process gets RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (what torchrun sets), plus
    COURSE_DIST_OUT; LOCAL_RANK only where every rank has a CUDA GPU of its own (`accelerator_local_rank`), never
    one naming a missing device. Workers that run their ranks on the CPU pass `cpu_mesh()` to FSDP2.
    All processes are joined; any still running after `timeout_s` seconds is killed with
    its children, and a RuntimeError says so. A worker that fails raises a RuntimeError with the end of its stderr.
    """
    if not isinstance(script, str | os.PathLike):
        raise TypeError(f"script must be a path (str or os.PathLike), got {type(script).__name__}")
    path = Path(script)
    if not path.is_file():
        raise ValueError(f"script must be an existing file, got {str(script)!r}")
    check_int("world_size", world_size, minimum=2, maximum=8)
    check_number("timeout_s", timeout_s, positive=True)
    if not isinstance(args, tuple) or not all(isinstance(a, str) for a in args):
        raise TypeError(f"args must be a tuple of str, got {args!r}")
    if env is not None and not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                               for k, v in env.items())):
        raise TypeError("env must be a dict of str to str or None")
    root = str(Path(__file__).resolve().parents[2])
    for attempt in range(2):  # a second try on a new port if another process took the first one meanwhile
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="dist-launch-") as tmp:
            out = Path(tmp) / "result.json"
            late, codes, tails = _run_ranks(path, args, env, world_size, port, out, root, timeout_s)
            port_taken = any("address already in use" in t.lower() for t in tails)
            if port_taken and attempt == 0:
                continue
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (0, None)]
            if failed:  # a failed rank first: the others may only have waited for it
                rank, code = failed[0]
                raise RuntimeError(f"{path.name}: rank {rank} exited with code {code}; its output ends with:\n"
                                   f"{tails[rank]}")
            if late:
                raise RuntimeError(f"{path.name} did not finish within {timeout_s:g} s on ranks {late}; all "
                                   f"{world_size} processes were killed")
            if not out.exists():
                raise RuntimeError(f"{path.name} finished but rank 0 wrote no result to ${OUT_ENV}")
            return json.loads(out.read_text())
    raise AssertionError("unreachable")


# destroy_process_group can hang in a rank whose peer holding the TCPStore (rank 0) has already left
# (pytorch/pytorch#75097; torchelastic makes rank 0 leave last for this reason, pytorch/pytorch#74931). Seen here
# twice, under load, with gloo: rank 0 wrote the result and exited 0, rank 1 never exited. Once rank 0 has written
# the result and exited cleanly, the job's result is complete: a peer still running this long after is stopped.
TEARDOWN_GRACE_S = 5.0


def _run_ranks(path: Path, args: tuple[str, ...], env: dict[str, str] | None, world_size: int, port: int,
               out: Path, root: str, timeout_s: float) -> tuple[list[int], list[int | None], list[str]]:
    """Start every rank, wait until all exit, one fails, or the deadline passes; stop them all. Returns the ranks
    still running at the deadline, each rank's exit code (None if it was stopped) and the end of its output."""
    procs, logs = [], []
    for rank in range(world_size):
        penv = {**os.environ, **(env or {}), "RANK": str(rank),
                "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                OUT_ENV: str(out),
                "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        penv.pop("LOCAL_RANK", None)
        local_rank = accelerator_local_rank(rank, world_size)
        if local_rank is not None:
            penv["LOCAL_RANK"] = local_rank
        log = open(out.parent / f"rank{rank}.log", "w+b")  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, str(path), *args], env=penv, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            codes = [proc.poll() for proc in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if codes[0] == 0 and out.exists():  # rank 0 wrote the result and left: its peers only tear down,
                deadline = min(deadline, time.monotonic() + TEARDOWN_GRACE_S)  # which can hang without it
            time.sleep(0.1)
        stopped = set()
        if procs[0].poll() == 0 and out.exists():
            stopped = {rank for rank, proc in enumerate(procs) if proc.poll() is None}
            for rank in stopped:
                _stop(procs[rank])  # stuck in destroy_process_group after rank 0's TCPStore went away (see above)
        late = [rank for rank, proc in enumerate(procs) if proc.poll() is None]
        codes = [None if rank in stopped else proc.poll() for rank, proc in enumerate(procs)]
        if any(code not in (None, 0) for code in codes):
            late = []  # the failure is the news, not the ranks left waiting for the failed one
    finally:
        for proc in procs:
            _stop(proc)
    tails = []
    for log in logs:
        log.seek(0)
        tails.append(log.read().decode(errors="replace")[-1500:])
        log.close()
    return late, codes, tails
