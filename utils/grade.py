"""Grade submitted lab notebooks: `python -m utils.grade PATH...` (make grade SUBMISSIONS=folder).

Each submission runs in its own process and a fresh kernel, under a time limit. The grader does not
trust the submission's check cells: it removes them, inserts its own copies from the course's lab
(each re-importing the check functions fresh), and reads verdicts only from the outputs of the cells it
inserted, under the checks' own MIME type. So printing "PASSED", editing or deleting a check cell, or
replacing a check function earns nothing. A submission that raises, loops, exits, kills its kernel or
prints megabytes gets 0 for what did not pass, with the reason, and the run goes on.

Grading executes the submitted code: run it in a container or sandbox, never with your credentials.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from utils.checks.core import CHECK_MIME, STRICT_ENV
from utils.labs import LABS_DIR
from utils.labs import course_metadata as _course
from utils.tables import format_table

DEFAULT_TIME_LIMIT_S = 300
MAX_OUTPUT_BYTES = 1_000_000  # per submission, the grader's own check cells excluded


@dataclass
class ExerciseScore:
    exercise: str
    points: float
    max_points: float
    status: str
    reason: str


@dataclass
class SubmissionScore:
    submission: str
    lab: str
    exercises: list[ExerciseScore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_total(self) -> float:
        return sum(e.max_points for e in self.exercises)



def find_lab(submission: NotebookNode, path: Path, labs_dir: Path = LABS_DIR) -> Path:
    """The course lab a submission answers: from its metadata, else from its file name."""
    name = submission.metadata.get("course", {}).get("lab")
    if isinstance(name, str) and (labs_dir / f"{name}.ipynb").exists():
        return labs_dir / f"{name}.ipynb"
    for lab in sorted(labs_dir.glob("*.ipynb"), key=lambda p: -len(p.stem)):
        if lab.stem in path.stem:
            return lab
    raise ValueError(f"{path.name}: cannot tell which lab this is (no course.lab metadata, and no lab name "
                     f"such as {', '.join(p.stem for p in sorted(labs_dir.glob('*.ipynb')))} in the file name)")


def _reimport_prelude(lab: NotebookNode) -> str:
    """Source that reloads the check modules the lab imports and re-binds their names, fresh from disk."""
    imports = sorted({m.group(0) for c in lab.cells if c.cell_type == "code"
                      for m in re.finditer(r"^from utils\.checks\.\w+ import [\w, ()]+$", c.source, flags=re.M)})
    modules = sorted({line.split()[1] for line in imports})
    lines = ["import importlib as _grader_importlib", "import utils.checks.core as _grader_core",
             "_grader_importlib.reload(_grader_core)"]
    for module in modules:
        lines += [f"import {module} as _grader_m", "_grader_importlib.reload(_grader_m)"]
    return "\n".join(lines + imports)


def prepare(submission: NotebookNode, lab: NotebookNode) -> tuple[NotebookNode, dict[str, str], dict[str, float]]:
    """The submission with the grader's own check cells in place of the learner's.

    Returns the notebook, {grader cell id: exercise}, and {exercise: points}.
    """
    nb = nbformat.from_dict(json.loads(json.dumps(submission)))
    reference = {c.get("id"): c for c in lab.cells}
    # Drop whatever looks like a check: by tag, by metadata, or by a reference check cell's id.
    nb.cells = [c for c in nb.cells if "check" not in c.get("metadata", {}).get("tags", [])
                and "check" not in _course(c)
                and not (c.get("id") in reference and "check" in _course(reference[c.get("id")]))]
    points = {_course(c)["exercise"]: float(_course(c).get("points", 1)) for c in lab.cells if "exercise" in _course(c)}
    prelude = _reimport_prelude(lab)
    owned: dict[str, str] = {}
    lab_ids = [c.get("id") for c in lab.cells]
    for position, cell in enumerate(lab.cells):
        exercise = _course(cell).get("check")
        if exercise is None:
            continue
        check = nbformat.v4.new_code_cell(prelude + "\n" + cell.source)
        check.id = f"grader-{uuid.uuid4().hex[:12]}"
        owned[check.id] = exercise
        # After the nearest earlier lab cell still present in the submission (normally the exercise itself).
        ids = [c.get("id") for c in nb.cells]
        anchor = next((ids.index(i) for i in reversed(lab_ids[:position]) if i in ids), len(nb.cells) - 1)
        nb.cells.insert(anchor + 1, check)
    return nb, owned, points


class _GradingClient(NotebookClient):
    """nbclient with an output budget: past it, the submission's outputs are dropped (checks' are kept)."""

    def __init__(self, nb: NotebookNode, owned: set[str], **kwargs: object) -> None:
        super().__init__(nb, **kwargs)
        self._owned_indices = {i for i, c in enumerate(nb.cells) if c.get("id") in owned}
        self._output_bytes = 0
        self.truncated = False

    def output(self, outs, msg, display_id, cell_index):  # type: ignore[no-untyped-def]
        if cell_index not in self._owned_indices:
            self._output_bytes += len(json.dumps(msg.get("content", {})))
            if self._output_bytes > MAX_OUTPUT_BYTES:
                self.truncated = True
                return None
        return super().output(outs, msg, display_id, cell_index)


def execute(nb: NotebookNode, owned: dict[str, str], time_limit_s: float, workdir: Path) -> list[str]:
    """Run every code cell in a fresh kernel until the time limit; return notes on what went wrong."""
    notes: list[str] = []
    client = _GradingClient(
        nb, set(owned), kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "TimeLimit", "evalue": "the cell ran past the time limit", "traceback": []},
        resources={"metadata": {"path": str(workdir)}}, timeout=int(time_limit_s),
    )
    deadline = time.monotonic() + time_limit_s
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            remaining = deadline - time.monotonic()
            if remaining < 1:
                notes.append(f"time limit of {time_limit_s:g} s reached before cell {index}")
                break
            client.timeout = max(1, int(remaining))
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                notes.append(f"the kernel died in cell {index} (os._exit, a crash, or running out of memory)")
                break
            except CellTimeoutError:
                notes.append(f"cell {index} ran past the time limit")
                break
    if client.truncated:
        notes.append(f"output beyond {MAX_OUTPUT_BYTES:,} bytes was dropped")
    return notes


def score(nb: NotebookNode, owned: dict[str, str], points: dict[str, float]) -> list[ExerciseScore]:
    """One score per exercise, read only from the grader's own check cells."""
    found: dict[str, ExerciseScore] = {}
    for cell in nb.cells:
        exercise = owned.get(cell.get("id"))
        if exercise is None:
            continue
        outputs = cell.get("outputs", [])
        verdicts = [o["data"][CHECK_MIME] for o in outputs if CHECK_MIME in o.get("data", {})]
        verdict = next((v for v in verdicts if v.get("exercise") == exercise), None)
        max_points = points.get(exercise, 1.0)
        if verdict is not None:
            earned = max_points if verdict["status"] == "passed" else 0.0
            found[exercise] = ExerciseScore(exercise, earned, max_points, verdict["status"], verdict["message"])
            continue
        errors = [o for o in outputs if o.get("output_type") == "error"]
        reason = (f"the check cell raised {errors[0]['ename']}: {errors[0]['evalue']}"[:300] if errors
                  else "the check did not run (an earlier cell stopped the notebook)")
        found[exercise] = ExerciseScore(exercise, 0.0, max_points, "error", reason)
    return [found.get(ex, ExerciseScore(ex, 0.0, p, "error", "no check ran")) for ex, p in points.items()]


def grade_notebook(path: Path, *, labs_dir: Path = LABS_DIR, time_limit_s: float = DEFAULT_TIME_LIMIT_S
                   ) -> SubmissionScore:
    """Grade one submission in this process (the command line runs each in a child process)."""
    try:
        submission = nbformat.read(path, as_version=4)
    except Exception as exc:
        return SubmissionScore(path.name, "?", notes=[f"not a readable notebook: {type(exc).__name__}: {exc}"])
    try:
        lab_path = find_lab(submission, path, labs_dir)
    except ValueError as exc:
        return SubmissionScore(path.name, "?", notes=[str(exc)])
    lab = nbformat.read(lab_path, as_version=4)
    nb, owned, points = prepare(submission, lab)
    with tempfile.TemporaryDirectory(prefix="grade-") as workdir:
        notes = execute(nb, owned, time_limit_s, Path(workdir))
    return SubmissionScore(path.name, lab_path.stem, score(nb, owned, points), notes)


def _grade_in_child(path: Path, labs_dir: Path, time_limit_s: float) -> SubmissionScore:
    """Grade in a child process, killed if it outlives the time limit by a minute (kernel start, cleanup)."""
    with tempfile.TemporaryDirectory(prefix="grade-result-") as tmp:
        out = Path(tmp) / "score.json"
        cmd = [sys.executable, "-m", "utils.grade", "--one", str(path), "--result", str(out),
               "--labs", str(labs_dir), "--time-limit", str(time_limit_s)]
        env = {k: v for k, v in os.environ.items() if k != STRICT_ENV}
        try:
            subprocess.run(cmd, env=env, timeout=time_limit_s + 60, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return _zeroed(path, labs_dir, f"killed after {time_limit_s + 60:g} s: over the time limit")
        if not out.exists():
            return _zeroed(path, labs_dir, "the grading process died before writing a score")
        data = json.loads(out.read_text())
        return SubmissionScore(data["submission"], data["lab"], [ExerciseScore(**e) for e in data["exercises"]],
                               data["notes"])


def _zeroed(path: Path, labs_dir: Path, reason: str) -> SubmissionScore:
    try:
        lab = nbformat.read(find_lab(nbformat.read(path, as_version=4), path, labs_dir), as_version=4)
        name = lab.metadata.get("course", {}).get("lab", "?")
    except Exception:
        return SubmissionScore(path.name, "?", notes=[reason])
    exercises = [ExerciseScore(_course(c)["exercise"], 0.0, float(_course(c).get("points", 1)), "error", reason)
                 for c in lab.cells if "exercise" in _course(c)]
    return SubmissionScore(path.name, name, exercises, [reason])


def collect(paths: list[Path]) -> list[Path]:
    """The notebooks named, and those inside the folders named (checkpoints skipped)."""
    found = []
    for p in paths:
        if p.is_dir():
            found += [q for q in sorted(p.rglob("*.ipynb")) if ".ipynb_checkpoints" not in q.parts]
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise ValueError(f"{p}: not a notebook or a folder")
    return found


def report(scores: list[SubmissionScore], csv_dir: Path) -> str:
    """The score table per lab (printed), and one CSV per lab for the gradebook."""
    csv_dir.mkdir(parents=True, exist_ok=True)
    text = []
    for lab in sorted({s.lab for s in scores}):
        group = [s for s in scores if s.lab == lab]
        exercises = sorted({e.exercise for s in group for e in s.exercises}, key=lambda x: [int(p) for p in
                                                                                               x.split(".")])
        headers = ["submission"] + [f"ex {e}" for e in exercises] + ["total", "max"]
        rows = []
        for s in group:
            by_ex = {e.exercise: e for e in s.exercises}
            rows.append([s.submission] + [f"{by_ex[e].points:g}" if e in by_ex else "-" for e in exercises]
                        + [f"{s.total:g}", f"{s.max_total:g}"])
        text.append(f"Lab {lab}\n" + format_table(rows, headers))
        reasons = [f"- {s.submission}, ex {e.exercise}: {e.status}: {e.reason}" for s in group for e in s.exercises
                   if e.status != "passed"] + [f"- {s.submission}: {n}" for s in group for n in s.notes]
        if reasons:
            text.append("Why points were lost:\n" + "\n".join(reasons))
        with open(csv_dir / f"{lab if lab != '?' else 'unknown'}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(headers + ["notes"])
            for s, row in zip(group, rows, strict=True):
                lost = [f"ex {e.exercise}: {e.status}: {e.reason}" for e in s.exercises if e.status != "passed"]
                writer.writerow(row + ["; ".join(lost + s.notes)])
    return "\n\n".join(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade submitted lab notebooks (runs their code: use a sandbox).")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks or folders of notebooks")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="seconds per notebook")
    parser.add_argument("--labs", type=Path, default=LABS_DIR, help="the course's labs folder")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (each in its own process)")
    parser.add_argument("--csv-dir", type=Path, default=Path("grades"), help="where the CSV files go")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.time_limit <= 0:
        parser.error("--time-limit must be positive")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.one:  # the child process: grade one notebook, write its score as JSON
        result = grade_notebook(args.one, labs_dir=args.labs, time_limit_s=args.time_limit)
        args.result.write_text(json.dumps(asdict(result)))
        return 0
    if not args.paths:
        parser.error("name at least one submitted notebook or folder")
    try:
        paths = collect(args.paths)
    except ValueError as exc:
        parser.error(str(exc))
    if not paths:
        parser.error("no notebooks found in " + ", ".join(map(str, args.paths)))
    print(f"grading {len(paths)} notebook(s), {args.jobs} at a time, {args.time_limit:g} s each at most", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        scores = list(pool.map(lambda p: _grade_in_child(p, args.labs, args.time_limit), paths))
    print("\n" + report(scores, args.csv_dir))
    print(f"\nCSV written to {args.csv_dir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
