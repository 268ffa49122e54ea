"""`make gpu-check`: one command for a workshop host to prove the course on its GPU before the workshop.

On a CUDA GPU it
1. runs every chapter notebook (00-09) at the full size of the GPU's memory tier, in a fresh kernel each, with a
   timeout per cell, recording reference results (COURSE_RECORD=1: results/<device>/NN_*.json);
2. records each notebook's wall time and its peak memory: the highest max_memory_allocated and
   max_memory_reserved of the kernel's process (it keeps the maximum across every reset_peak_memory_stats), and the
   device's peak as nvidia-smi reports it, sampled about every 0.5 s while the notebook runs (every process on the
   GPU: the kernel, its child processes such as chapter 07's fragmentation child and chapter 06's workers, and each
   one's CUDA context; a short spike between two samples can be missed, so it is a lower bound of the true peak);
3. compares the course's memory estimator with the measured step peak on the validation configurations of
   `utils.lessons.estimate.validate` (goal: within 5%), before the chapters;
4. writes results/<device>/gpu_check.json and gpu_check.md (after each chapter, so a stopped run keeps what it
   measured; `--time-limit S` starts no chapter after S seconds), and prints a table of what passed and what did not,
   with the reason. It exits 0 when everything passed, 1 otherwise.

Without a CUDA GPU it prints one line saying so (with the remedy when torch's CUDA build does not suit the driver:
`utils.lessons.env.cuda_build_note`) and exits with status 2.

This process never creates a CUDA context and never imports Transformer Engine: the device is described and the
estimator measured in short-lived child processes, so the notebooks' kernels (which measure the CUDA context with
nvidia-smi) share the GPU with nothing of ours.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from utils.validate import check_bool, check_choice, check_int, check_str

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO_ROOT / "notebooks"
ESTIMATE_TOLERANCE = 0.05  # the estimator should be within 5% of max_memory_allocated above the start
NO_GPU_EXIT = 2
PEAK_MARK = "GPU_CHECK_PEAK "
CHILD_MARK = "GPU_CHECK_CHILD "

# Runs in a child process: the device, or null when torch sees no CUDA GPU (the child's context dies with it).
DEVICE_QUERY = f"""\
import json as _json
import torch as _torch
if _torch.cuda.is_available():
    from utils.lessons.env import device_uuid
    from utils.lessons.sizes import memory_tier
    _i = _torch.cuda.current_device()
    _p = _torch.cuda.get_device_properties(_i)
    _out = {{"name": _p.name, "capability": [_p.major, _p.minor], "total_memory": int(_p.total_memory),
            "tier": memory_tier(), "uuid": device_uuid(_i)}}
else:
    _out = None
print({CHILD_MARK!r} + _json.dumps(_out))
"""

# Runs in a child process: utils.lessons.estimate.validate on the GPU, the configurations from the environment.
ESTIMATOR_QUERY = f"""\
import dataclasses as _dc, json as _json, os as _os
from utils.course.gpu_check import estimator_check
_configs = _json.loads(_os.environ["GPU_CHECK_CONFIGS"])
print({CHILD_MARK!r} + _json.dumps([_dc.asdict(e) for e in estimator_check(_configs)]))
"""

# Runs in the notebook's kernel before its first cell: keep the highest peak across resets.
PEAK_PRELUDE = """\
import torch as _gc_torch
_gc_peak = {"allocated": 0, "reserved": 0}
_gc_reset = _gc_torch.cuda.reset_peak_memory_stats
def _gc_reset_keeping_max(device=None, _reset=_gc_reset):
    _gc_peak["allocated"] = max(_gc_peak["allocated"], _gc_torch.cuda.max_memory_allocated(device))
    _gc_peak["reserved"] = max(_gc_peak["reserved"], _gc_torch.cuda.max_memory_reserved(device))
    _reset(device)
_gc_torch.cuda.reset_peak_memory_stats = _gc_reset_keeping_max
_gc_torch.cuda.memory.reset_peak_memory_stats = _gc_reset_keeping_max
"""

# Runs after the notebook's last cell: print the peaks for the parent to read.
PEAK_EPILOGUE = f"""\
import json as _gc_json
_gc_peak["allocated"] = max(_gc_peak["allocated"], _gc_torch.cuda.max_memory_allocated())
_gc_peak["reserved"] = max(_gc_peak["reserved"], _gc_torch.cuda.max_memory_reserved())
print({PEAK_MARK!r} + _gc_json.dumps(_gc_peak))
"""


@dataclass
class ChapterResult:
    notebook: str
    passed: bool
    reason: str
    wall_s: float
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    failed_cells: list[str] = field(default_factory=list)
    peak_device_used: int | None = None  # nvidia-smi's memory.used, sampled: children and CUDA contexts included


@dataclass
class EstimateResult:
    config: str
    measured: int
    estimated: int
    analytic: int

    @property
    def error(self) -> float:
        return (self.estimated - self.measured) / self.measured if self.measured else float("inf")

    @property
    def passed(self) -> bool:
        return abs(self.error) <= ESTIMATE_TOLERANCE


def chapter_notebooks(chapters: list[str] | None = None, folder: Path = NOTEBOOKS) -> list[Path]:
    """The chapter notebooks (notebooks/NN_*.ipynb), all or those whose number is in `chapters`."""
    found = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if chapters is None:
        return found
    numbers = {p.name[:2] for p in found}
    for ch in chapters:
        check_choice("chapter", ch, sorted(numbers))
    return [p for p in found if p.name[:2] in chapters]


def _first_line(text: str) -> str:
    lines = [t for t in str(text).strip().splitlines() if t.strip()]
    return lines[0] if lines else ""


def _smi_memory_used(uuid: str | None = None, timeout_s: float = 10.0) -> int | None:
    """utils.lessons.env.nvidia_smi_memory_used for the GPU `uuid` (here so tests can replace it)."""
    from utils.lessons.env import nvidia_smi_memory_used as used

    return used(uuid=uuid, timeout_s=timeout_s) if uuid else None


class DevicePeakSampler:
    """Samples nvidia-smi's memory.used of the GPU `uuid` in a thread while a block runs and keeps the highest:
    what the device held for every process (children included) with their CUDA contexts. Sampled, so a lower
    bound of the true peak; `peak` is None when nvidia-smi gave no reading."""

    def __init__(self, uuid: str | None, interval_s: float = 0.5) -> None:
        if uuid is not None:
            check_str("uuid", uuid)
        self.uuid, self.interval_s = uuid, float(interval_s)
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            used = _smi_memory_used(self.uuid, timeout_s=5.0)
            if used is not None:
                self.peak = used if self.peak is None else max(self.peak, used)
            self.samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> DevicePeakSampler:
        if self.uuid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def run_chapter(path: Path, *, size: str = "full", cell_timeout: int = 1800, record: bool = True,
                prelude: str = "", extra_env: dict[str, str] | None = None,
                device_uuid: str | None = None, keep_to: Path | None = None) -> ChapterResult:
    """Run one notebook in a fresh kernel at `size`; never raises for a failing notebook (it is reported).
    With `keep_to`, the executed notebook (the GPU's own outputs) is written into that folder."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from utils.course.kernels import notebook_client_config

    check_choice("size", size, ("tiny", "quick", "full"))
    check_int("cell_timeout", cell_timeout, minimum=1)
    check_bool("record", record)
    nb = nbformat.read(path, as_version=4)
    extra = [nbformat.v4.new_code_cell(PEAK_PRELUDE)]
    if prelude:
        extra.insert(0, nbformat.v4.new_code_cell(prelude))
    nb.cells = extra + nb.cells + [nbformat.v4.new_code_cell(PEAK_EPILOGUE)]
    # a kept notebook keeps its figures (the inline backend); otherwise nothing is drawn for anyone
    backend = "Agg" if keep_to is None else "module://matplotlib_inline.backend_inline"
    env = dict(os.environ, COURSE_SIZE=size, COURSE_RECORD="1" if record else "0", MPLBACKEND=backend)
    env.update(extra_env or {})
    # The kernel imports utils from this checkout, installed or not (a GPU image's own python3 runs it too).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            config=notebook_client_config(),
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    reason = ""
    with DevicePeakSampler(device_uuid) as sampler:
        try:
            client.execute(env=env)
        except CellTimeoutError:
            reason = f"a cell ran past {cell_timeout} s"
        except DeadKernelError as exc:
            reason = f"the kernel died (out of host memory?): {_first_line(exc)}"
        except Exception as exc:  # noqa: BLE001 (any failure of the run is reported, not raised)
            reason = f"{type(exc).__name__}: {_first_line(exc)}"
    wall = time.perf_counter() - t0
    if keep_to is not None:
        Path(keep_to).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, Path(keep_to) / path.name)
    failed, peak = [], None
    first_real = len(extra)
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                where = index - first_real
                failed.append(f"cell {where}: {out.get('ename')}: {_first_line(out.get('evalue', ''))}"[:240])
            elif out.get("output_type") == "stream" and PEAK_MARK in out.get("text", ""):
                line = [t for t in out["text"].splitlines() if t.startswith(PEAK_MARK)][-1]
                peak = json.loads(line[len(PEAK_MARK):])
    if failed and not reason:
        reason = f"{len(failed)} cell(s) failed; first: {failed[0]}"
    return ChapterResult(path.name, not reason, reason or "every cell ran", round(wall, 1),
                         None if peak is None else int(peak["allocated"]),
                         None if peak is None else int(peak["reserved"]), failed, sampler.peak)


def _bytes_of(cell: str) -> int:
    return int(cell.split(" ")[0].replace(",", ""))


def estimator_check(configs: list[dict[str, Any]] | None = None) -> list[EstimateResult]:
    """utils.lessons.estimate.validate on this GPU: the traced estimator and the analytic sum of parts against the
    measured step peak (max_memory_allocated above the step's start, plus the state the step owns)."""
    from utils.lessons.estimate import validate

    results = []
    for row in validate(configs):
        precision, optimizer, ckpt, batch = row[:4]
        results.append(EstimateResult(f"{precision}, {optimizer}, checkpointing {ckpt}, batch {batch}",
                                      _bytes_of(row[4]), _bytes_of(row[5]), _bytes_of(row[6])))
    return results


def _in_child(code: str, *, prelude: str = "", extra_env: dict[str, str] | None = None,
              timeout_s: float = 3600) -> Any:
    """Run `prelude + code` in a fresh Python process and return the JSON it printed after CHILD_MARK; a failure
    raises RuntimeError with the end of its output."""
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", prelude + "\n" + code], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=timeout_s, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(CHILD_MARK)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the child process failed (exit code {done.returncode}): {tail[0]}")
    return json.loads(lines[-1][len(CHILD_MARK):])


def query_device(prelude: str = "", extra_env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The CUDA device a notebook kernel will see ({name, capability, total_memory, tier, uuid}), or None when torch
    sees no CUDA GPU, asked in a child process so that this one holds no CUDA context."""
    return _in_child(DEVICE_QUERY, prelude=prelude, extra_env=extra_env, timeout_s=300)


def no_gpu_line() -> str:
    """The one line printed without a usable CUDA GPU, with the driver's remedy where torch's build is the cause."""
    from utils.lessons.env import cuda_build_note, nvidia_smi_cuda_version

    note = cuda_build_note(torch.version.cuda, nvidia_smi_cuda_version(), False)
    return ("gpu-check needs a CUDA GPU and torch sees none here: " + note if note else
            "gpu-check needs a CUDA GPU and torch sees none here: run it on the GPU host "
            "(CPU and Apple machines are covered by make test).")


def reference_gpu(device: str) -> Any:
    """The time model's reference GPU (utils.lessons.time_model.GPUS) that `device` (torch's device name) is, or None.

    Matched by model, not by substring: "A100" with "80GB" in the name is the A100-80GB (its own rates), "A10G" is
    not an "A10", and a GPU the time model does not list gets None (no prediction rather than another card's)."""
    from utils.lessons.time_model import GPUS

    check_str("device", device)
    name = device.upper().replace("NVIDIA", " ").replace("TESLA", " ")
    words = set(re.split(r"[\s\-_/]+", name)) - {""}
    if "A100" in words:
        return GPUS["A100-80GB"] if "80GB" in words or "80G" in words else GPUS["A100"]
    for key in ("H100", "A10G", "T4"):
        if key in words:
            return GPUS[key]
    return None


def predicted_wall(device: str, tier: int, chapter: str) -> str:
    """utils.lessons.time_model's predicted seconds for a chapter's full size on this GPU when it is one of the
    reference GPUs (reference_gpu), else "-": a real run checks the time model."""
    from utils.lessons.time_model import chapter_work, predicted_seconds

    gpu = reference_gpu(device)
    if gpu is None or not ("00" <= chapter <= "10"):
        return "-"
    return f"{predicted_seconds(chapter_work(chapter, tier), gpu, chapter=chapter):.0f}"


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f}"


def report(device: str, tier: int, size: str, chapters: list[ChapterResult], estimates: list[EstimateResult],
           estimate_error: str = "") -> str:
    """The printed (and saved) summary as Markdown."""
    from utils.lessons.sizes import TIER_EXAMPLES, tier_budget
    from utils.lessons.tables import format_table

    lines = [f"# gpu-check on {device}", "",
             f"Memory tier {tier} GiB ({TIER_EXAMPLES[tier]}), size {size}, budget per experiment "
             f"{tier_budget(tier) / 2**30:.2f} GiB; torch {torch.__version__}; {dt.date.today().isoformat()}.", ""]
    rows = [(c.notebook, "passed" if c.passed else "FAILED", f"{c.wall_s:.1f}",
             predicted_wall(device, tier, c.notebook[:2]) if size == "full" else "-", _gib(c.peak_allocated),
             _gib(c.peak_reserved), _gib(c.peak_device_used), c.reason) for c in chapters]
    lines.append(format_table(rows, ["notebook", "result", "wall s", "time model s", "peak allocated GiB",
                                     "peak reserved GiB", "device peak GiB (nvidia-smi, sampled)", "reason"]))
    lines += ["", "Peak allocated and reserved are the kernel's own process; the device peak is nvidia-smi's "
              "memory.used sampled every 0.5 s: every process on the GPU (chapter 07's fragmentation child, "
              "chapter 06's workers) and their CUDA contexts, a lower bound of the true peak."
              " The time model's seconds are a prediction from FLOPs,"
              " per-step overheads and fixed costs (utils/lessons/time_model.py): a real run checks them."]
    lines.append("")
    if estimate_error:
        lines.append(f"Estimator check FAILED to run: {estimate_error}")
    elif estimates:
        rows = [(e.config, f"{e.measured:,}", f"{e.estimated:,}", f"{100 * e.error:+.1f}%",
                 f"{e.analytic:,}", "passed" if e.passed else f"FAILED (more than {ESTIMATE_TOLERANCE:.0%} off)")
                for e in estimates]
        lines.append(format_table(rows, ["configuration", "measured B", "traced estimator B", "error",
                                         "analytic B", "result"]))
    return "\n".join(lines)


def check(chapters: list[str] | None = None, *, size: str | None = None, cell_timeout: int = 1800,
          results_root: Path | None = None, record: bool = True, prelude: str = "",
          validate_configs: list[dict[str, Any]] | None = None, run_estimator: bool = True,
          extra_env: dict[str, str] | None = None, time_limit_s: float | None = None,
          keep_to: Path | None = None) -> tuple[bool, str]:
    """Run the GPU check (see the module doc); returns (everything passed, the report).

    The estimator is checked first, then the chapters in order; the summary is rewritten after each chapter, so a
    run that is stopped keeps what it measured. A chapter that would start after `time_limit_s` is reported as not
    run (a host with a short lease still gets a complete table)."""
    from utils.course.results import RESULTS_DIR, device_slug

    size = "full" if size is None else check_choice("size", size, ("tiny", "quick", "full"))
    if time_limit_s is not None and not (isinstance(time_limit_s, int | float) and time_limit_s > 0):
        raise ValueError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    start = time.perf_counter()
    device = query_device(prelude, extra_env)
    if device is None:
        raise RuntimeError("gpu-check needs a CUDA GPU")
    tier = device["tier"]
    folder = Path(results_root or RESULTS_DIR) / device_slug(device["name"])
    folder.mkdir(parents=True, exist_ok=True)
    estimates: list[EstimateResult] = []
    estimate_error = ""
    if run_estimator:
        print("checking the estimator against measured steps ...", flush=True)
        try:
            rows = _in_child(ESTIMATOR_QUERY, prelude=prelude,
                             extra_env={**(extra_env or {}), "GPU_CHECK_CONFIGS": json.dumps(validate_configs)})
            estimates = [EstimateResult(**row) for row in rows]
        except Exception as exc:  # noqa: BLE001 (reported in the table)
            estimate_error = f"{type(exc).__name__}: {_first_line(exc)}"
    results: list[ChapterResult] = []
    paths = chapter_notebooks(chapters)
    for number, path in enumerate(paths):
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            result = ChapterResult(path.name, False, f"not run: the {time_limit_s:g} s time limit had passed", 0.0)
        else:
            print(f"running {path.name} at size {size} ...", flush=True)
            result = run_chapter(path, size=size, cell_timeout=cell_timeout, record=record, prelude=prelude,
                                 extra_env=extra_env, device_uuid=device.get("uuid"), keep_to=keep_to)
            print(f"  {'passed' if result.passed else 'FAILED'} in {result.wall_s:.1f} s: {result.reason}",
                  flush=True)
        results.append(result)
        ok, text = _write_summary(folder, device, tier, size, results, estimates, estimate_error,
                                  complete=number == len(paths) - 1)
    if not paths:
        ok, text = _write_summary(folder, device, tier, size, results, estimates, estimate_error, complete=True)
    return ok, text


def _write_summary(folder: Path, device: dict[str, Any], tier: int, size: str, results: list[ChapterResult],
                   estimates: list[EstimateResult], estimate_error: str, *, complete: bool) -> tuple[bool, str]:
    """Write gpu_check.json and gpu_check.md in `folder` for the chapters run so far; returns (passed, report)."""
    text = report(device["name"], tier, size, results, estimates, estimate_error)
    ok = complete and all(r.passed for r in results) and all(e.passed for e in estimates) and not estimate_error
    summary = {"kind": "gpu_check",
               "device": {"name": device["name"], "capability": device["capability"],
                          "total_memory": device["total_memory"]},
               "tier": tier, "size": size, "torch": torch.__version__, "date": dt.date.today().isoformat(),
               "passed": ok, "complete": complete, "chapters": [asdict(r) for r in results],
               "estimator": [asdict(e) | {"error": e.error, "passed": e.passed} for e in estimates],
               "estimator_error": estimate_error}
    (folder / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (folder / "gpu_check.md").write_text(text + "\n", encoding="utf-8")
    return ok, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapters", nargs="+", metavar="NN", help="only these chapters (default: all)")
    parser.add_argument("--size", choices=("tiny", "quick", "full"), default="full",
                        help="experiment size (default full: the GPU's memory tier)")
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds per cell (default 1800)")
    parser.add_argument("--no-record", action="store_true", help="do not write reference results")
    parser.add_argument("--no-estimator", action="store_true", help="skip the estimator check")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="start no chapter after S seconds (those left are reported as not run)")
    parser.add_argument("--keep-notebooks", type=Path, default=None, metavar="DIR",
                        help="write each executed notebook (its GPU outputs) into DIR")
    args = parser.parse_args(argv)
    check_str("size", args.size)
    try:
        device = query_device()
    except (RuntimeError, subprocess.SubprocessError) as exc:  # torch itself fails to start: say so in one line
        print(f"gpu-check could not describe the GPU ({_first_line(exc)}); {no_gpu_line()}", file=sys.stderr)
        return NO_GPU_EXIT
    if device is None:
        print(no_gpu_line(), file=sys.stderr)
        return NO_GPU_EXIT
    ok, text = check(args.chapters, size=args.size, cell_timeout=args.cell_timeout, record=not args.no_record,
                     run_estimator=not args.no_estimator, time_limit_s=args.time_limit,
                     keep_to=args.keep_notebooks)
    print()
    print(text)
    print()
    print("gpu-check: everything passed." if ok else "gpu-check: some checks FAILED (see the reasons above).")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
