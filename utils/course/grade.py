"""Grade submitted lab notebooks: `python -m utils.course.grade PATH...` (make grade SUBMISSIONS=folder).

Each submission runs in its own process and a fresh kernel, under a time limit. The grader does not trust the
submission's check cells: it removes them and inserts its own. Its first cell, before the learner's, SEALS the
lab's check modules (grading/runner.py): while the learner's cells run, `from utils.course.checks.chNN import check_x`
gives stand-ins with no reference, truth function or expected value in their globals. After each exercise, its
cell opens the real checks fresh from disk, runs the lab's check call with the learner's arguments (the PUBLIC
cases), then the held-out cases `HIDDEN[exercise]` of grading/hidden/chNN.py (loaded by file path: never
importable from a lab), under the exercise's memory cap where it has one (`memory_limit_mb`). The kernel only
PRODUCES ANSWERS there, and the learner's code never runs in the process that holds the check: each call of the
learner's functions, and each scene (a check's scenario run with the learner's code, whose outcome the check
compares: the gradients a checkpointed block leaves, the state a loss scaler reaches; utils.course.scenes), is
answered by another process (a fork of the kernel made before the checks open, or one that clears its stack and the
check modules first: grading/runner.py), recorded as plain data and sent to this process, which runs the same checks
on them (`score`, `combine`): a part earns its points only where that comparison passed and the kernel found nothing
against it (a call to a reference, a memory cap, a thread of the learner's). The grader reads only what its own
cells display under the checks' MIME type, tagged with a nonce of this run. So printing "PASSED", editing or
deleting a check cell, replacing a check function or reading a check's globals earns nothing. A submission that
raises, loops, exits, kills its kernel or prints megabytes gets 0 for what did not pass, with the reason, and the
run goes on.

Points come from the lab's metadata: with held-out cases, the public cases earn half of an exercise's points and
the held-out cases the other half; an answer over its memory cap scores 0. A prediction's reasoning is read, not
counted: of an exercise with one, REASONING_POINTS are given by hand. Open challenges are listed with their points
as graded by hand (rubric). Output: a table per lab, one CSV per lab (with a "read by hand" column: every
reasoning with its text, marked where it names fewer than two of the exercise's quantities, and each answer cell
naming a check's internals or the interpreter's frames), and Gradescope's results.json per submission
(`--results-json FILE` for the one submission of a Gradescope run).

Grading executes the submitted code: run it in a container or sandbox, never with your credentials
(docs/instructors.md shows a `docker run --network none` line).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from utils.course.checks.protocol import CHECK_MIME, READ_BY_HAND, REASONING_POINTS, STRICT_ENV, named_quantities
from utils.course.forkserver import ForkServer, not_dumpable
from utils.course.kernels import notebook_client_config, started_again
from utils.course.labs import (
    HIDDEN_DIR,
    LABS_DIR,
    REPO_ROOT,
    Exercise,
    LabError,
    check_imports,
    hidden_path,
    lab_exercises,
    parse_check_call,
    read_notebook,
)
from utils.course.labs import course_metadata as _course
from utils.lessons.tables import format_table
from utils.validate import check_instance, check_number

DEFAULT_TIME_LIMIT_S = 300
MAX_OUTPUT_BYTES = 1_000_000  # per submission, the grader's own check cells excluded
RUNNER = REPO_ROOT / "grading" / "runner.py"
FORKSERVER_ENV = "COURSE_GRADE_FORKSERVER"  # "0": each grading child starts afresh (imports torch and the checks)
BY_HAND = "graded by hand (rubric)"


@dataclass
class ExerciseScore:
    exercise: str
    points: float
    max_points: float
    status: str
    reason: str
    by_hand: bool = False
    public: str = ""  # status of the public cases ("" where they did not run)
    hidden: str = ""  # status of the held-out cases ("" where the exercise has none or they did not run)
    hidden_max: float = 0.0  # the points the held-out cases carry (0 where the exercise has none)


@dataclass
class SubmissionScore:
    submission: str
    lab: str
    exercises: list[ExerciseScore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)  # the learner's challenge answers, for hand grading

    @property
    def total(self) -> float:
        return sum(e.points for e in self.exercises if not e.by_hand)

    @property
    def max_total(self) -> float:
        return sum(e.max_points for e in self.exercises if not e.by_hand)

    @property
    def by_hand_max(self) -> float:
        return sum(e.max_points for e in self.exercises if e.by_hand)


def metadata_problem(submission: NotebookNode) -> str | None:
    """A line on a submission's notebook metadata `course` that is present but not a mapping, else None."""
    metadata = submission.get("metadata", {})
    course = metadata.get("course") if isinstance(metadata, Mapping) else None
    if course is None or isinstance(course, Mapping):
        return None
    return (f"its notebook metadata `course` is a {type(course).__name__}, not a mapping (the lab writes "
            '{"lab": ...} there); the lab was taken from the file name')


def find_lab(submission: NotebookNode, path: Path, labs_dir: Path = LABS_DIR) -> Path:
    """The course lab a submission answers: from its metadata, else from its file name."""
    path, labs_dir = Path(check_instance("path", path, (str, Path))), Path(check_instance("labs_dir", labs_dir,
                                                                                          (str, Path)))
    name = _course(submission).get("lab")
    if isinstance(name, str) and re.fullmatch(r"[\w.-]+", name) and (labs_dir / f"{name}.ipynb").exists():
        return labs_dir / f"{name}.ipynb"
    for lab in sorted(labs_dir.glob("*.ipynb"), key=lambda p: -len(p.stem)):
        if lab.stem in path.stem:
            return lab
    by_cells = _lab_from_cells(submission, labs_dir)
    if by_cells is not None:
        return by_cells
    problem = metadata_problem(submission)
    raise ValueError(f"{path.name}: cannot tell which lab this is ("
                     + (problem.split(";")[0] if problem else "no course.lab metadata")
                     + f", and no lab name such as {', '.join(p.stem for p in sorted(labs_dir.glob('*.ipynb')))} "
                       "in the file name)")


def _exercise_ids(nb: NotebookNode) -> set[str]:
    """The exercise ids a notebook's cells carry in their `course` metadata (exercise cells and check cells)."""
    ids = set()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}) if isinstance(cell, Mapping) else {}
        course = meta.get("course") if isinstance(meta, Mapping) else None
        if isinstance(course, Mapping):
            for key in ("exercise", "check"):
                if isinstance(course.get(key), str):
                    ids.add(course[key])
    return ids


def _lab_from_cells(submission: NotebookNode, labs_dir: Path) -> Path | None:
    """The lab whose exercise ids the submission's cells carry (a renamed solution or lab without its notebook
    metadata), or None when no lab's exercises are there or two labs match equally."""
    found = _exercise_ids(submission)
    if not found:
        return None
    ranked = []
    for lab in sorted(labs_dir.glob("*.ipynb")):
        try:
            ids = _exercise_ids(nbformat.read(lab, as_version=4))
        except Exception:  # a broken lab file is reported where it is graded, not here
            continue
        if ids:
            ranked.append((len(found & ids), lab))
    ranked.sort(key=lambda r: -r[0])
    if not ranked or ranked[0][0] == 0 or (len(ranked) > 1 and ranked[1][0] == ranked[0][0]):
        return None
    return ranked[0][1]


def reasoning_key(exercise: Exercise) -> str | None:
    """The argument key ("0", "1"... or a keyword) under which an exercise's check call hands over the learner's
    `reasoning`, or None where the exercise asks for none."""
    if not exercise.check:
        return None
    _, args, kwargs = parse_check_call(exercise.check)
    if "reasoning" in args:
        return str(args.index("reasoning"))
    return next((k for k, v in kwargs.items() if v == "reasoning"), None)


def autograded_points(exercise: Exercise) -> float:
    """What the autograder can give an exercise: all its points, but for the REASONING_POINTS of a reasoning,
    which the instructor gives by hand after reading it (a reasoning is read, not counted)."""
    return exercise.points - REASONING_POINTS if reasoning_key(exercise) is not None else exercise.points


def reasoning_note(exercise: str, text: object) -> str:
    """The read-by-hand line of one reasoning: its text, and whether it names the exercise's quantities."""
    if text is Ellipsis:
        return "the reasoning was left as handed out (`...`)"
    if not isinstance(text, str) or not text.strip():
        return "no reasoning reached the grader (the exercise cell did not run, or it is not a string)"
    named = named_quantities(text, exercise)
    mark = (f"it {READ_BY_HAND} (it names {', '.join(named) or 'none of them'})" if len(named) < 2
            else f"it names {', '.join(named)}")
    return f"{text[:2000]!r}: {mark}"


def lab_check_imports(lab: NotebookNode) -> dict[str, list[str]]:
    """{module: names} the lab imports from its check modules: the ones the seal replaces
    (utils.course.labs.check_imports, the same reading the lab generator does)."""
    return check_imports(lab)


def _load_runner() -> str:
    return "\n".join([
        "import importlib.util as _grader_iu",
        f"_grader_spec = _grader_iu.spec_from_file_location('_course_grading_runner', {str(RUNNER)!r})",
        "_grader_runner = _grader_iu.module_from_spec(_grader_spec)",
        "_grader_spec.loader.exec_module(_grader_runner)",
    ])


def _seal_cell_source(imports: dict[str, list[str]]) -> str:
    return "\n".join([_load_runner(), f"_grader_runner.seal({imports!r})",
                      "del _grader_runner, _grader_spec, _grader_iu"])


def _grader_cell_source(modules: list[str], exercise: Exercise, hidden: Path | None, nonce: str,
                        warm_optimizer: bool) -> str:
    parse_check_call(exercise.check or "")  # the lab was validated; this keeps a hand-made lab honest
    return "\n".join([
        _load_runner(),
        f"_grader_runner.grade_exercise(globals(), exercise={exercise.id!r}, points={autograded_points(exercise)!r}, "
        f"call={exercise.check!r}, hidden_path={str(hidden) if hidden and hidden.exists() else None!r}, "
        f"memory_limit_mb={exercise.memory_limit_mb!r}, nonce={nonce!r}, mime={CHECK_MIME!r}, "
        f"modules={tuple(modules)!r}, warm_optimizer={warm_optimizer!r})",
        "del _grader_runner, _grader_spec, _grader_iu",
    ])


def _names_optimizers(submission: NotebookNode, modules: Iterable[str], hidden: Path | None) -> bool:
    """Whether the submission's code cells, the lab's check modules or its held-out cases name torch.optim: then
    the memory cap's warm-up builds an optimizer first (grading/runner.py, WARM_OPTIMIZER), so that an answer that
    trains does not pay torch._dynamo's import (about 67 MiB of address space) inside its cap. Where nothing does
    (lab 00), the warm-up skips that second of CPU."""
    texts = [c.get("source", "") for c in submission.get("cells", []) if c.get("cell_type") == "code"]
    texts += [(REPO_ROOT / Path(*m.split("."))).with_suffix(".py").read_text(encoding="utf-8") for m in modules]
    texts += [hidden.read_text(encoding="utf-8")] if hidden is not None and hidden.exists() else []
    return any("optim" in (t if isinstance(t, str) else "".join(t)) for t in texts)


def prepare(submission: NotebookNode, lab: NotebookNode, *, nonce: str = "", hidden_dir: Path = HIDDEN_DIR
            ) -> tuple[NotebookNode, dict[str, str], list[Exercise]]:
    """The submission with the grader's own check cells in place of the learner's, and a first cell that seals the
    lab's check modules (the learner's cells import stand-ins that hold no reference).

    Returns the notebook, {grader cell id: exercise}, and the lab's exercises (challenges included).
    """
    name = _course(lab).get("lab") or "lab"
    exercises = lab_exercises(lab, str(name))
    nb = nbformat.from_dict(json.loads(json.dumps(submission)))
    reference = {c.get("id"): c for c in lab.cells}
    # Drop whatever looks like a check: by tag, by metadata, or by a reference check cell's id.
    nb.cells = [c for c in nb.cells if not (isinstance(c.get("metadata"), Mapping)
                                            and "check" in (c.metadata.get("tags") or []))
                and "check" not in _course(c)
                and not (c.get("id") in reference and "check" in _course(reference[c.get("id")]))]
    imports = lab_check_imports(lab)
    hidden = hidden_path(str(name), hidden_dir)
    by_id = {e.id: e for e in exercises}
    warm_optimizer = _names_optimizers(nb, imports, hidden)
    owned: dict[str, str] = {}
    lab_ids = [c.get("id") for c in lab.cells]
    for position, cell in enumerate(lab.cells):
        exercise = _course(cell).get("check")
        if exercise not in by_id:
            continue
        check = nbformat.v4.new_code_cell(_grader_cell_source(list(imports), by_id[exercise], hidden, nonce,
                                                              warm_optimizer))
        check.id = f"grader-{uuid.uuid4().hex[:12]}"
        owned[check.id] = exercise
        # After the nearest earlier lab cell still present in the submission (normally the exercise itself).
        ids = [c.get("id") for c in nb.cells]
        anchor = next((ids.index(i) for i in reversed(lab_ids[:position]) if i in ids), len(nb.cells) - 1)
        nb.cells.insert(anchor + 1, check)
    seal = nbformat.v4.new_code_cell(_seal_cell_source(imports))
    seal.id = f"grader-seal-{uuid.uuid4().hex[:8]}"
    nb.cells.insert(0, seal)
    return nb, owned, exercises


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
        config=notebook_client_config(),
        error_on_timeout={"ename": "TimeLimit", "evalue": "the cell ran past the time limit", "traceback": []},
        resources={"metadata": {"path": str(workdir)}}, timeout=int(time_limit_s),
    )
    deadline = time.monotonic() + time_limit_s
    _start_kernel(client)
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


def _start_kernel(client: NotebookClient) -> None:
    """Start `client`'s kernel and its client, again where the kernel dies before its first reply (a port race:
    utils.course.kernels.started_again; no cell has run then, so a grade never depends on it)."""
    def start() -> None:
        client.km = client.create_kernel_manager()
        client.start_new_kernel()
        client.start_new_kernel_client()  # on failure it shuts the kernel down and clears km and kc

    started_again(start)


def _hand(exercise: Exercise) -> ExerciseScore:
    return ExerciseScore(exercise.id, 0.0, exercise.points, BY_HAND,
                         f"open challenge, {exercise.points:g} points: " + "; ".join(
                             f"{c} ({p:g})" for c, p in exercise.rubric), by_hand=True)


def _runner() -> object:
    """grading/runner.py, loaded by its path into the grader's own process (for the replay)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_course_grading_runner_host", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answers_sent(outputs: list, exercise: str, nonce: str) -> tuple[dict | None, dict[tuple[str, str], list]]:
    """What a grader cell's kernel sent for a recorded exercise: the learner's values and functions' spec, and each
    function's answers per (part, argument), in call order. The first message for a place counts: what a later
    message (a thread of the learner's, a forged display) says about answers already sent is ignored."""
    spec: dict | None = None
    records: dict[tuple[str, str], list] = {}
    for o in outputs:
        data = o.get("data", {}).get(CHECK_MIME) if isinstance(o.get("data"), Mapping) else None
        if not isinstance(data, Mapping) or data.get("nonce") != nonce or data.get("exercise") != exercise:
            continue
        if data.get("kind") == "args" and spec is None and isinstance(data.get("args"), Mapping):
            spec = dict(data["args"])
        elif data.get("kind") == "records" and isinstance(data.get("items"), list):
            key = (str(data.get("part")), str(data.get("arg")))
            have = records.setdefault(key, [])
            start = data.get("start")
            if isinstance(start, int) and start == len(have):  # in order, never over what was sent
                have.extend(i for i in data["items"] if isinstance(i, Mapping))
    return spec, records


def combine(kernel: Mapping, replayed: Mapping, points: float) -> dict:
    """The exercise's verdict: a part (public, held-out) earns its points only where the grader's replay on the
    recorded answers passed AND the kernel's run found nothing against it (a call to a reference, a memory cap,
    a thread): the kernel can take points away, never grant them."""
    if kernel.get("void") or kernel.get("status") == "over memory cap" or not isinstance(kernel.get("public"), Mapping):
        return {**kernel, "points": 0.0} if kernel.get("void") else dict(kernel)
    parts = {}
    for part in ("public", "hidden"):
        mine, theirs = replayed.get(part), kernel.get(part)
        if not isinstance(theirs, Mapping):
            parts[part] = None
        elif not isinstance(mine, Mapping):
            parts[part] = {**theirs, "status": "error", "points": 0.0,
                           "message": "the grader could not compare these answers"}
        elif mine.get("status") != "passed":
            parts[part] = dict(mine)
        elif theirs.get("status") != "passed":
            parts[part] = dict(theirs)
        else:
            parts[part] = dict(mine)
    public, held = parts["public"], parts["hidden"]
    if public is None:
        return dict(replayed) if replayed.get("status") != "passed" else dict(kernel)
    earned = sum(float(p.get("points", 0.0)) for p in (public, held) if p)
    if public.get("status") == "not attempted":
        status, message = "not attempted", public.get("message", "")
    else:
        status = "passed" if earned == points else "partial" if earned > 0 else next(
            p.get("status", "failed") for p in (public, held) if p and p.get("status") != "passed")
        if status == "passed":
            message = "public and held-out cases passed" if held else "public cases passed"
        else:
            message = f"public cases: {public.get('status')}" + (
                f": {public.get('message')}" if public.get("status") != "passed" else "")
            if held:
                message += f" | held-out cases: {held.get('status')}" + (
                    f": {held.get('message')}" if held.get("status") != "passed" else "")
    return {**kernel, "public": public, "hidden": held, "status": status, "points": earned, "message": message,
            "compared": "in the grader"}


def score(nb: NotebookNode, owned: dict[str, str], exercises: list[Exercise], nonce: str = "",
          hidden_dir: Path = HIDDEN_DIR, lab_name: str = "", modules: tuple = ()) -> list[ExerciseScore]:
    """One score per exercise, read only from the grader's own check cells (challenges: graded by hand). For a
    recorded exercise, the grader runs the checks here, on the answers the kernel sent (see `combine`)."""
    found: dict[str, ExerciseScore] = {}
    by_id = {e.id: e for e in exercises}
    runner = None
    reasonings: dict[str, ExerciseScore] = {}
    for cell in nb.cells:
        exercise = owned.get(cell.get("id"))
        if not exercise:
            continue
        outputs = cell.get("outputs", [])
        key = reasoning_key(by_id[exercise])
        if key is not None:
            sent = (answers_sent(outputs, exercise, nonce)[0] or {}).get(key)
            text = sent.get("value") if isinstance(sent, Mapping) else None
            text = Ellipsis if isinstance(text, Mapping) and text.get("ellipsis") else text
            reasonings[exercise] = ExerciseScore(f"{exercise} reasoning", 0.0, REASONING_POINTS, BY_HAND,
                                                 reasoning_note(exercise, text), by_hand=True)
        verdicts = [o["data"][CHECK_MIME] for o in outputs if CHECK_MIME in o.get("data", {})]
        ours = [v for v in verdicts if isinstance(v, Mapping) and v.get("exercise") == exercise
                and v.get("nonce") == nonce and v.get("kind", "verdict") == "verdict" and "status" in v]
        max_points = autograded_points(by_id[exercise])
        if len(ours) > 1:  # the grader's cell displays one verdict: another is a forgery of the learner's code
            found[exercise] = ExerciseScore(exercise, 0.0, max_points, "failed", "the cell showed more than one "
                                            "verdict: the learner's code displayed one of its own")
            continue
        if ours and _replaced(ours[0]) is not None:
            found[exercise] = ExerciseScore(exercise, 0.0, max_points, "failed", f"{TAMPERED}: {_replaced(ours[0])}")
            continue
        if ours:
            v = dict(ours[0])
            # the replay can only lower what the kernel found (see `combine`): where the kernel gave nothing there is
            # nothing to compare, and this process need not import torch for it
            earned_in_kernel = v.get("points", 0.0)
            if by_id[exercise].check and isinstance(earned_in_kernel, int | float) \
                    and earned_in_kernel > 0:
                spec, records = answers_sent(outputs, exercise, nonce)
                try:
                    runner = runner or _runner()
                    hidden = hidden_path(lab_name, hidden_dir) if lab_name else None
                    replayed = runner.replay(exercise, max_points, by_id[exercise].check,
                                             str(hidden) if hidden and hidden.exists() else None, spec or {}, records,
                                             tuple(modules))
                except Exception as exc:  # noqa: BLE001 - a replay that cannot start scores 0, with the reason
                    replayed = {"status": "error", "points": 0.0, "public": None, "hidden": None,
                                "message": f"the grader's comparison failed: {type(exc).__name__}: {exc}"[:300]}
                v = combine(v, replayed, max_points)
            earned = float(v.get("points", 0.0))
            earned = earned if math.isfinite(earned) and 0 <= earned <= max_points else 0.0
            parts = [v.get(k) if isinstance(v.get(k), Mapping) else {} for k in ("public", "hidden")]
            hidden_max = v.get("hidden_max", 0.0)
            hidden_max = float(hidden_max) if isinstance(hidden_max, int | float) and 0 <= hidden_max <= max_points \
                else 0.0
            found[exercise] = ExerciseScore(exercise, earned, max_points, str(v.get("status", "error")),
                                            str(v.get("message", ""))[:1000], False,
                                            str(parts[0].get("status", "")), str(parts[1].get("status", "")),
                                            hidden_max)
            continue
        errors = [o for o in outputs if o.get("output_type") == "error"]
        reason = (f"the check cell raised {errors[0]['ename']}: {errors[0]['evalue']}"[:300] if errors
                  else "the check did not run (an earlier cell stopped the notebook)")
        if errors and errors[0].get("ename") == "GraderTampered":  # the grader's cell refused to show a verdict
            reason = f"{TAMPERED}: {str(errors[0].get('evalue', '')).rpartition(':')[2].strip()}"[:300]
        found[exercise] = ExerciseScore(exercise, 0.0, max_points, "error", reason)
    scores = []
    for e in exercises:
        if e.by_hand:
            scores.append(_hand(e))
            continue
        scores.append(found.get(e.id, ExerciseScore(e.id, 0.0, autograded_points(e), "error", "no check ran")))
        if reasoning_key(e) is not None:
            scores.append(reasonings.get(e.id, _reasoning_unread(e)))
    return scores


THREAD_VOID = "a thread of the learner's code"  # grading/runner.py's message when a foreign thread was alive
TAMPERED = ("the learner's code replaced what the grader's verdict passes through, so the grader's cell showed no "
            "verdict (read the notebook by hand)")


def _replaced(verdict: Mapping) -> str | None:
    """What the grading kernel found replaced since the seal (grading/runner.py: replaced_since_seal), or None when
    nothing was. A verdict that does not say is treated as replaced: the grader's cell always says."""
    found = verdict.get("replaced")
    if isinstance(found, list) and not found:
        return None
    names = [str(n) for n in found[:5]] if isinstance(found, list) else ["(the verdict's record of it is missing)"]
    return ", ".join(names)


def _reasoning_unread(e: Exercise) -> ExerciseScore:
    return ExerciseScore(f"{e.id} reasoning", 0.0, REASONING_POINTS, BY_HAND, reasoning_note(e.id, None),
                         by_hand=True)


def _challenge_answers(submission: NotebookNode, lab: NotebookNode, exercises: list[Exercise]) -> dict[str, str]:
    """The learner's answer cell of each challenge (by the lab's answer cell id), for the hand grader."""
    by_id = {c.get("id"): c for c in submission.get("cells", []) if isinstance(c, Mapping)}
    answers = {}
    for cell in lab.cells:
        ex = _course(cell).get("answer")
        if ex in {e.id for e in exercises if e.by_hand}:
            found = by_id.get(cell.get("id"))
            text = found.get("source", "") if found is not None else ""
            answers[ex] = (text if isinstance(text, str) else "".join(text))[:20_000]
    return answers


_GRADING_MODULES = ("utils.course.checks", "grading")
# a class the lab's text offers, e.g. the model
_OFFERED = re.compile(r"from (utils\.course\.checks\.\w+) import (\w+)")


def _grading_imports(nb: NotebookNode) -> set[str]:
    """What a notebook's code imports from the checks or the held-out cases: "module:name" for `from M import name`,
    "module" for `import M` (cells that do not parse are skipped: they fail when they run)."""
    found: set[str] = set()
    for cell in nb.get("cells", []):
        if not isinstance(cell, Mapping) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        try:
            tree = ast.parse(source if isinstance(source, str) else "".join(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_GRADING_MODULES):
                found |= {f"{node.module}:{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith(_GRADING_MODULES)}
            elif isinstance(node, ast.Call) and _callee(node) in DYNAMIC_IMPORTS and node.args \
                    and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith(_GRADING_MODULES):
                # importlib.import_module("utils.course.checks.ch02"); a string alone is not an import (review
                # 34c, M2), and a module named by a computed string is read by hand instead
                found.add(str(node.args[0].value))
    return found


DYNAMIC_IMPORTS = ("import_module", "__import__", "find_spec")


def _callee(call: ast.Call) -> str:
    """The called function's own name: `f` for f(...), `attr` for x.attr(...), "" for anything else."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def reference_imports(submission: NotebookNode, lab: NotebookNode) -> list[str]:
    """What the submission imports from utils.course.checks or grading/ beyond what the handed-out lab imports (its
    check functions): a check's reference or truth function, or its held-out cases. A submission that does so is
    given no autograded points: the checks compare an answer with those functions; they cannot also produce it."""
    check_instance("submission", submission, Mapping)
    check_instance("lab", lab, Mapping)
    offered = {f"{m}:{n}" for cell in lab.get("cells", []) if cell.get("cell_type") == "markdown"
               for m, n in _OFFERED.findall(cell.get("source", "") if isinstance(cell.get("source"), str) else "")}
    return sorted(_grading_imports(submission) - _grading_imports(lab) - offered)


# What an honest answer has no use for: a function's globals, code or closure, the profile and trace hooks,
# building a function from a code object, reading the interpreter's frames (inspect, sys._getframe, a frame's or a
# traceback's, generator's or coroutine's frame attributes) or object graph, or loading a file as a module. Each
# answer cell that names one, or reads an attribute by a computed name (getattr(x, "f_" + "globals")), is listed
# in the grade notes for the instructor to read. A list of names is a prompt for a reader, not a proof: the
# grading itself does not rely on it (the learner's code runs where no check is, grading/runner.py).
INTERNALS = ("__globals__", "__code__", "__closure__", "__builtins__", "__self__", "cell_contents", "setprofile",
             "settrace", "getprofile", "gettrace", "FunctionType", "CodeType", "_getframe", "currentframe", "f_back",
             "f_globals", "f_locals", "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "inspect",
             "getargvalues", "_current_frames", "get_referents", "get_referrers", "get_objects", "unfreeze",
             "spec_from_file_location", "SourceFileLoader", "run_path", "ctypes", "meta_path", "sys.modules",
             # a process started by the answer runs outside the check's watch (review 34c, A5)
             "fork", "forkpty", "posix_spawn", "posix_spawnp", "subprocess", "multiprocessing", "_posixsubprocess",
             # ... or before the check, serving the reference from a helper process (review s5, F2)
             "system", "popen", "Popen", "spawnv", "spawnve", "spawnl", "execv", "execve", "execl", "pty",
             # ... or the instruments a check's scene measures with, run beside the learner's code (review s15's red
             # team: a saved-tensor hook, the dispatch mode of a peak meter, a forward-hook counter, raw memory)
             "saved_tensors_hooks", "_push_saved_tensors_default_hooks", "_python_dispatch", "_disable_current_modes",
             "_get_current_dispatch_mode", "_pop_mode", "_forward_hooks", "_forward_pre_hooks",
             "_global_forward_hooks", "data_ptr", "_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack",
             "_get_dispatch_stack_at", "_pop_saved_tensors_default_hooks", "_saved_tensors_hooks_disable",
             "_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
# ... except where the exercise itself asks for one: its answer cell is not listed for it
ASKED_FOR = {"0.2": ("data_ptr",), "0.4": ("data_ptr",), "1.2": ("data_ptr", "saved_tensors_hooks")}
COMPUTED_GETATTR = "getattr with a computed attribute name"
COMPUTED_IMPORT = "a module imported by a computed name"
RUNS_SOURCE = ("exec", "eval", "compile", "__import__")  # called by their builtin names: code run from a string


COURSE_PATHS = ("utils/course/checks", "grading/hidden",
                "grading/runner")  # a check's source read or loaded by its path


def internals_used(submission: NotebookNode) -> list[str]:
    """One line per code cell of the submission that names any of INTERNALS (as a name, an attribute, an imported
    module or a string), with its exercise where the cell carries one: for the instructor to read by hand."""
    check_instance("submission", submission, Mapping)
    lines = []
    for index, cell in enumerate(submission.get("cells", [])):
        if not isinstance(cell, Mapping) or cell.get("cell_type") != "code" or "check" in _course(cell):
            continue
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        found: list[str] = []
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Attribute):
                names = [node.attr] + ([f"{node.value.id}.{node.attr}"] if isinstance(node.value, ast.Name) else [])
            elif isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            found += [n for n in names if n in INTERNALS and n not in found]
            if isinstance(node, ast.Call) and _callee(node) in RUNS_SOURCE and _callee(node) not in found \
                    and (isinstance(node.func, ast.Name) or (isinstance(node.func.value, ast.Name)
                                                             and node.func.value.id == "builtins")):
                found.append(_callee(node))  # exec(...), and builtins.exec(...) too (review 34c, A4); not
                # torch.compile or re.compile (review s5, F4)
            if isinstance(node, ast.Call) and _callee(node) in DYNAMIC_IMPORTS and node.args \
                    and not isinstance(node.args[0], ast.Constant) and COMPUTED_IMPORT not in found:
                found.append(COMPUTED_IMPORT)  # import_module("utils." + "checks.ch02") (review 34c, M2)
            if isinstance(node, ast.Attribute) and node.attr == "__file__" and isinstance(node.value, ast.Name) \
                    and node.value.id in ("utils", "grading") and "a path into the checks" not in found:
                found.append("a path into the checks")  # os.path.dirname(utils.__file__) + pieces (review 34c, A4)
            elif isinstance(node, ast.Attribute) and node.attr == "__file__" and "a module's source file" not in found:
                found.append("a module's source file")  # a reference's source read, edited and run (review s5, F2b)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant) \
                    and COMPUTED_GETATTR not in found:
                found.append(COMPUTED_GETATTR)
            path_like = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if path_like and "a path into the checks" not in found \
                    and any(part in node.value.replace("\\", "/") for part in COURSE_PATHS):
                found.append("a path into the checks")
        exercise = _course(cell).get("exercise")
        found = [n for n in found if n not in ASKED_FOR.get(exercise, ())]
        if found:
            where = f"the answer cell of exercise {exercise}" if isinstance(exercise, str) else f"code cell {index}"
            lines.append(f"read by hand: {where} uses {', '.join(found)} (a check's internals, the interpreter's "
                         "frames or the watch on the learner's calls; an honest answer has no use for them)")
    return lines


def grade_notebook(path: Path, *, labs_dir: Path = LABS_DIR, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                   hidden_dir: Path = HIDDEN_DIR) -> SubmissionScore:
    """Grade one submission in this process (the command line runs each in a child process)."""
    path = Path(check_instance("path", path, (str, Path)))
    time_limit_s = check_number("time_limit_s", time_limit_s, positive=True)
    try:
        submission = read_notebook(path)
    except LabError as exc:  # still a row in its lab's CSV where the file name tells the lab
        return _zeroed(path, labs_dir, f"not a readable notebook: {exc}")
    notes = [f"{path.name}: {p}" for p in [metadata_problem(submission)] if p]
    try:
        lab_path = find_lab(submission, path, labs_dir)
    except ValueError as exc:
        return SubmissionScore(path.name, "?", notes=[str(exc)])
    lab = read_notebook(lab_path)
    nonce = uuid.uuid4().hex
    nb, owned, exercises = prepare(submission, lab, nonce=nonce, hidden_dir=hidden_dir)
    with tempfile.TemporaryDirectory(prefix="grade-") as workdir:
        notes += execute(nb, owned, time_limit_s, Path(workdir))
    scores = score(nb, owned, exercises, nonce, hidden_dir, str(_course(lab).get("lab") or lab_path.stem),
                   tuple(lab_check_imports(lab)))
    notes += internals_used(submission)
    # one line each for the instructor (each exercise's reason says what was found); a library's idle thread pool
    # (torch.compile's) can be what was alive, so the instructor decides
    notes += _voided(scores, TAMPERED, "the learner's code replaced a function the grader's verdict passes through")
    notes += _voided(scores, THREAD_VOID, "a thread that is not the kernel's was alive while the check ran",
                     " (a library's thread pool, e.g. torch.compile's, can cause this for honest code: regrade by hand "
                     "if the answers are the learner's own)")
    borrowed = reference_imports(submission, lab)
    if borrowed:
        reason = (f"the notebook imports what the checks compare answers with ({', '.join(borrowed)}), not only the "
                  "lab's check functions: no autograded points")
        notes.append(reason)
        scores = [s if s.by_hand else ExerciseScore(s.exercise, 0.0, s.max_points, "failed", reason)
                  for s in scores]
    return SubmissionScore(path.name, lab_path.stem, scores, notes, _challenge_answers(submission, lab, exercises))


def _voided(scores: list[ExerciseScore], reason: str, what: str, advice: str = "") -> list[str]:
    """The read-by-hand note for the exercises whose reason starts with `reason` (none when there are none)."""
    voided = [s.exercise for s in scores if s.reason.startswith(reason)]
    return [f"read by hand: {what}, which voided exercise{'s' * (len(voided) > 1)} {', '.join(voided)}{advice}"
            ] if voided else []


def _grade_in_child(path: Path, labs_dir: Path, time_limit_s: float, hidden_dir: Path,
                    server: ForkServer | None = None) -> SubmissionScore:
    """Grade in a child process (forked by `server` where there is one, else started afresh), killed if it outlives
    the time limit by a minute (kernel start, cleanup). The score comes back through a pipe that only the child holds
    (its kernel and anything the kernel starts do not inherit it): a score file could be rewritten by a process the
    submission left running."""
    args = ["--one", str(path), "--labs", str(labs_dir), "--hidden", str(hidden_dir),
            "--time-limit", repr(time_limit_s)]
    env = {k: v for k, v in os.environ.items() if k != STRICT_ENV}
    started = None
    if server is not None:
        with open(os.devnull, "wb") as null:
            started = _start_child(lambda result, err: server.spawn(
                [*args, "--result-fd", "@fd0"], stdout=null.fileno(), stderr=err, pass_fds=(result,)))
    if started is None:  # no server, or it has gone: a process of its own
        started = _start_child(lambda result, err: _Started(subprocess.Popen(
            [sys.executable, "-m", "utils.course.grade", *args, "--result-fd", str(result)], env=env,
            stdout=subprocess.DEVNULL, stderr=err, pass_fds=(result,), cwd=REPO_ROOT)))
    child, read_fd, err_read = started
    received: list[bytes] = []
    stderr: list[bytes] = []
    readers = [threading.Thread(target=lambda: received.append(_read_all(read_fd)), daemon=True),
               threading.Thread(target=lambda: stderr.append(_read_all(err_read)), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        if not child.wait(time_limit_s + 60):
            child.kill()
            child.wait(60)
            return _zeroed(path, labs_dir, f"killed after {time_limit_s + 60:g} s: over the time limit")
    finally:
        _RUNNING.discard(child.pid)
        child.close()
    for reader in readers:
        reader.join(timeout=10)  # a process the submission left running may hold the child's stderr open
    try:
        data = json.loads(received[0])
        return SubmissionScore(data["submission"], data["lab"], [ExerciseScore(**e) for e in data["exercises"]],
                               data["notes"], data.get("answers", {}))
    except (IndexError, ValueError, TypeError, KeyError):
        last = (b"".join(stderr).decode(errors="replace").strip().splitlines() or ["no message"])[-1][:300]
        return _zeroed(path, labs_dir, f"the grading process died before sending a score ({last})")


def _start_child(start) -> tuple | None:
    """(child, result pipe, stderr pipe) of `start(result_fd, stderr_fd)`, the child registered as running and the
    pipes' write ends held by it alone; None, both pipes closed, where `start` gives no child (a failed fork server:
    a child it may have forked writes into pipes nobody reads, review s11 K2)."""
    read_fd, write_fd, err_read, err_write = *os.pipe(), *os.pipe()
    child = None
    try:
        with _STARTING:
            child = start(write_fd, err_write)
            if child is not None:
                _RUNNING.add(child.pid)
    finally:
        os.close(write_fd)
        os.close(err_write)
        if child is None:
            os.close(read_fd)
            os.close(err_read)
    return None if child is None else (child, read_fd, err_read)


class _Started:
    """A grading child started with exec, behind the same three calls as a forked `forkserver.Child`."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.pid = process, process.pid

    def wait(self, timeout_s: float) -> bool:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        self.process.kill()

    def close(self) -> None:
        pass


# What every grading child needs, imported once by the fork server: the kernel's client, torch and every lab's
# checks (read here before any submission runs, like the trusted files).
GRADING_PRELOAD = ("nbclient", "jupyter_client", "torch", "utils.course.grade", "utils.course.checks.wire",
                   *(f"utils.course.checks.{p.stem}"
                     for p in sorted((REPO_ROOT / "utils" / "course" / "checks").glob("ch*.py"))),
                   "utils.course.checks.warmup")


_RUNNING: set[int] = set()  # the grading children at work now (their pids), and the fork server
_STARTING = threading.Lock()  # held while a grading child starts and while leftovers are stopped


def _adopt_orphans() -> bool:
    """On Linux, make this process the reaper of its orphaned descendants: a process a submission leaves running
    (double-forked, in a session of its own) then becomes a child of the grader, which can stop it."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _stop_leftovers() -> None:
    """Kill and reap this process's children other than the grading children at work: what a finished submission
    left running (adopted by `_adopt_orphans`)."""
    import signal

    with _STARTING:
        children: set[int] = set()
        for task in Path("/proc/self/task").glob("*"):
            try:
                children.update(int(p) for p in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
        for pid in children - _RUNNING:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def _zeroed(path: Path, labs_dir: Path, reason: str) -> SubmissionScore:
    try:
        try:
            submission = read_notebook(path)
        except LabError:
            submission = nbformat.v4.new_notebook()
        lab = read_notebook(find_lab(submission, path, labs_dir))
        name = _course(lab).get("lab", "?")
        exercises = lab_exercises(lab, name)
    except Exception:
        return SubmissionScore(path.name, "?", notes=[reason])
    scores = []
    for e in exercises:
        scores.append(_hand(e) if e.by_hand else ExerciseScore(e.id, 0.0, autograded_points(e), "error", reason))
        if not e.by_hand and reasoning_key(e) is not None:
            scores.append(_reasoning_unread(e))
    return SubmissionScore(path.name, name, scores, [reason])


def _trusted_files(roots: list[Path]) -> dict[Path, bytes]:
    """Every file under `roots` (the checks, the runner, the labs, the held-out cases: what a grade rests on) as
    bytes, read before any submission runs. Compiled caches aside (Python writes them as it imports)."""
    return {path: path.read_bytes() for root in roots for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts}


def _restore_trusted(files: dict[Path, bytes], roots: list[Path]) -> list[str]:
    """The trusted files a submission changed, added or deleted (a check module rewritten, the held-out cases
    removed), each put back as `_trusted_files` read it; [] when none was touched."""
    touched: set[Path] = set()
    for root in roots:
        for path in root.rglob("*"):
            if (path.is_file() or path.is_symlink()) and "__pycache__" not in path.parts and path not in files:
                touched.add(path)
                path.unlink()
    for path, data in files.items():
        try:
            same = not path.is_symlink() and path.read_bytes() == data
        except OSError:
            same = False
        if not same:
            touched.add(path)
            if path.is_symlink() or path.exists():
                path.unlink()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return sorted(map(_named, touched))


def _forged_caches(roots: list[Path], verified: dict[Path, tuple[int, int]]) -> list[str]:
    """The compiled caches (__pycache__/*.pyc of this Python) under `roots` that are not their source compiled,
    each deleted; [] when none is. Python loads a cache whose header matches its source's mtime and size, so a
    planted one would run the submission's code as a check's (review 34c); the caches Python writes as it imports are
    checked too, once each (`verified`: path -> (mtime_ns, size) of the caches found sound)."""
    import importlib.util
    import marshal

    forged = []
    for root in roots:
        for cache in root.rglob(f"__pycache__/*.{sys.implementation.cache_tag}*.pyc"):
            stat = cache.stat()
            if verified.get(cache) == (stat.st_mtime_ns, stat.st_size):
                continue
            try:
                source = Path(importlib.util.source_from_cache(str(cache)))
                level = int(cache.name.split(".opt-")[1][0]) if ".opt-" in cache.name else 0
                sound = marshal.loads(cache.read_bytes()[16:]) == compile(
                    source.read_bytes(), str(source), "exec", dont_inherit=True, optimize=level)
            except (OSError, ValueError, EOFError, TypeError, SyntaxError, IndexError):
                sound = False  # no source beside it, or not a cache at all
            if sound:
                verified[cache] = (stat.st_mtime_ns, stat.st_size)
            else:
                cache.unlink()
                forged.append(_named(cache))
    return forged


def _named(path: Path) -> str:
    """A trusted file as the grade notes name it: relative to the repository when inside it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _tampered(path: Path, labs_dir: Path, touched: list[str]) -> SubmissionScore:
    """A submission that changed the course's own files: no points, the files named for the instructor."""
    return _zeroed(path, labs_dir, f"the submission changed the course's own files ({', '.join(touched[:4])}"
                   f"{', ...' if len(touched) > 4 else ''}): they were put back; no points, read it by hand")


def collect(paths: list[Path]) -> list[Path]:
    """The notebooks named, and those inside the folders named (checkpoints skipped)."""
    if not isinstance(paths, list | tuple):
        raise TypeError(f"paths must be a list of notebook or folder paths, got {type(paths).__name__}")
    found = []
    for p in paths:
        p = Path(check_instance("paths item", p, (str, Path)))
        if p.is_dir():
            found += [q for q in sorted(p.rglob("*.ipynb")) if ".ipynb_checkpoints" not in q.parts]
        elif p.suffix == ".ipynb" and p.is_file():
            found.append(p)
        else:
            raise ValueError(f"{p}: not a notebook or a folder")
    return found


def _sort_key(exercise: str) -> list[int]:
    """An exercise id's place: "1.10" after "1.9", and "1.3 reasoning" right after "1.3"."""
    number, _, rest = exercise.partition(" ")
    return [int(p) if p.isdigit() else 0 for p in number.split(".")] + [1 if rest else 0]


# What a check tells the learner to do next (utils/course/checks/core.py); the instructor's summary and CSV say what was
# found instead. Gradescope's per-test output, which learners read, keeps the learner's wording.
_LEARNER_NEXT_STEP = re.compile(r": (replace the raise with your code|write your answer in its place), run that cell, "
                                r"then this one\.")


def for_instructor(reason: str) -> str:
    """A check's reason as an instructor reads it: the learner's next-step instruction becomes what was found."""
    return _LEARNER_NEXT_STEP.sub(" (the answer was left as handed out).", check_instance("reason", reason, str))


def _lost(s: SubmissionScore) -> list[str]:
    return [f"ex {e.exercise}: {e.status}: {for_instructor(e.reason)}" for e in s.exercises
            if e.status != "passed" and not e.by_hand]


def read_by_hand(s: SubmissionScore) -> list[str]:
    """What the instructor should read in a submission: every reasoning, with its text (its point is given by hand;
    one that names fewer than two of the exercise's quantities is marked so), and each answer cell that reaches
    into a check's internals or the interpreter's frames."""
    lines = [f"ex {e.exercise} (by hand, max {e.max_points:g}): {e.reason}" for e in s.exercises
             if e.exercise.endswith(" reasoning")]
    return lines + [n for n in s.notes if n.startswith("read by hand:")]


def report(scores: list[SubmissionScore], csv_dir: Path) -> str:
    """The score table per lab (printed), and one CSV per lab for the gradebook."""
    csv_dir.mkdir(parents=True, exist_ok=True)
    text = []
    for lab in sorted({s.lab for s in scores}):
        group = [s for s in scores if s.lab == lab]
        auto = sorted({e.exercise for s in group for e in s.exercises if not e.by_hand}, key=_sort_key)
        hand = sorted({e.exercise for s in group for e in s.exercises if e.by_hand}, key=_sort_key)
        hand_max = {e.exercise: e.max_points for s in group for e in s.exercises if e.by_hand}
        headers = (["submission"] + [f"ex {e}" for e in auto] + ["total", "max"]
                   + [f"ex {e} (by hand, max {hand_max[e]:g})" for e in hand] + (["by hand max"] if hand else []))
        rows = []
        for s in group:
            by_ex = {e.exercise: e for e in s.exercises}
            rows.append([s.submission] + [f"{by_ex[e].points:g}" if e in by_ex else "-" for e in auto]
                        + [f"{s.total:g}", f"{s.max_total:g}"] + ["by hand" for _ in hand]
                        + ([f"{s.by_hand_max:g}"] if hand else []))
        text.append(f"Lab {lab}\n" + format_table(rows, headers))
        maxima = {e.exercise: e.max_points for s in group for e in s.exercises if not e.by_hand}
        text.append("Points per exercise: " + ", ".join(f"{e}: {maxima[e]:g}" for e in auto)
                    + "".join(f"; {e}: {hand_max[e]:g} " + ("read and graded by hand" if e.endswith(" reasoning")
                                                              else BY_HAND) for e in hand))
        reasons = [f"- {s.submission}, {line}" for s in group for line in _lost(s)] + [
            f"- {s.submission}: {n}" for s in group for n in s.notes]
        if reasons:
            text.append("Why points were lost:\n" + "\n".join(reasons))
        to_read = [f"- {s.submission}, {line}" for s in group for line in read_by_hand(s)]
        if to_read:
            text.append("Read by hand (also the CSV's \"read by hand\" column):\n" + "\n".join(to_read))
        with open(csv_dir / f"{lab if lab != '?' else 'unknown'}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(headers + ["read by hand", "notes"])
            for s, row in zip(group, rows, strict=True):
                writer.writerow(row + ["; ".join(read_by_hand(s)), "; ".join(_lost(s) + s.notes)])
    return "\n\n".join(text)


def gradescope_results(s: SubmissionScore, execution_time_s: float | None = None) -> dict:
    """Gradescope's autograder results (gradescope-autograders.readthedocs.io/en/latest/specs/): one test per
    exercise's public cases (visible) and one per its held-out cases (shown once grades are published), each
    with score and max_score; a challenge appears with max_score 0, to be graded by hand in Gradescope."""
    tests = []
    for e in s.exercises:
        if e.by_hand and e.exercise.endswith(" reasoning"):
            tests.append({"name": f"Exercise {e.exercise}: read by the instructor", "number": e.exercise,
                          "score": 0.0, "max_score": 0.0, "visibility": "visible",
                          "output": f"Worth {e.max_points:g} point, given by hand to a reasoning that says how the "
                                    f"prediction follows from the exercise's quantities. The learner's reasoning: "
                                    f"{e.reason}"})
            continue
        if e.by_hand:
            answer = s.answers.get(e.exercise, "")
            tests.append({"name": f"Exercise {e.exercise}: open challenge, {BY_HAND}", "number": e.exercise,
                          "score": 0.0, "max_score": 0.0, "visibility": "visible",
                          "output": f"Worth {e.max_points:g} points, graded by hand. Rubric: {e.reason}\n\n"
                                    f"The learner's answer:\n{answer}"})
            continue
        split = e.hidden_max > 0
        public_max = e.max_points - e.hidden_max
        if e.status == "over memory cap":
            public_score = hidden_score = 0.0
        else:
            public_score = public_max if (e.public == "passed" or (not split and e.status == "passed")) else 0.0
            hidden_score = (e.max_points - public_max) if e.hidden == "passed" else 0.0
        public_out, _, hidden_out = e.reason.partition(" | held-out cases: ")
        tests.append({"name": f"Exercise {e.exercise}" + (": public cases" if split else ""), "number": e.exercise,
                      "score": public_score, "max_score": public_max, "visibility": "visible",
                      "status": "passed" if public_score == public_max else "failed",
                      "output": public_out if e.status != "over memory cap" else e.reason})
        if split:
            tests.append({"name": f"Exercise {e.exercise}: held-out cases", "number": f"{e.exercise}.h",
                          "score": hidden_score, "max_score": e.max_points - public_max,
                          "visibility": "after_published",
                          "status": "passed" if hidden_score == e.max_points - public_max else "failed",
                          "output": _held_out_for_learner(hidden_out) if hidden_out else e.reason})
    result = {"score": sum(t["score"] for t in tests), "tests": tests, "visibility": "visible",
              "stdout_visibility": "hidden",
              "output": "\n".join([f"Lab {s.lab}: {s.total:g} of {s.max_total:g} autograded points"
                                   + (f"; {s.by_hand_max:g} more points are graded by hand" if s.by_hand_max else "")]
                                  + s.notes)}
    if execution_time_s is not None:
        result["execution_time"] = round(execution_time_s, 1)
    return result


def _held_out_for_learner(detail: str) -> str:
    """The held-out cases' result as the learner sees it once grades are published: a failure that names a case's
    inputs and expected answer (review 34c, M1) keeps them private, so that a learner who resubmits cannot collect
    the cases with their answers; the instructor's CSV keeps the whole message."""
    if "expected" not in detail:
        return "held-out cases: " + detail
    status = detail.split(":", 1)[0]
    return (f"held-out cases: {status}: your answer differs from the expected one on a case you were not shown (its "
            "inputs and answer stay private so that the cases can be reused; your instructor's grade file names it)")


def write_gradescope(scores: list[SubmissionScore], folder: Path) -> None:
    """One results.json per submission: folder/<submission name>/results.json."""
    for s in scores:
        target = folder / Path(s.submission).stem
        target.mkdir(parents=True, exist_ok=True)
        (target / "results.json").write_text(json.dumps(gradescope_results(s), indent=1), encoding="utf-8")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line naming the argument, never the usage block
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    try:
        return check_number("--time-limit", value, positive=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--time-limit ")) from None


def clear_previous(csv_dir: Path) -> int:
    """Remove what an earlier grading run wrote into `csv_dir` (its lab CSVs and gradescope/<submission>/
    results.json), so no stale score survives; returns how many files went. Nothing else is touched."""
    csv_dir = Path(check_instance("csv_dir", csv_dir, (str, Path)))
    if not csv_dir.is_dir():
        return 0
    removed = 0
    for path in [*csv_dir.glob("*.csv"), *csv_dir.glob("gradescope/*/results.json")]:
        path.unlink()
        removed += 1
    for folder in csv_dir.glob("gradescope/*"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return removed


def _jobs(text: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m utils.course.grade",
                     description="Grade submitted lab notebooks (runs their code: use a sandbox).")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks or folders of notebooks")
    parser.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT_S, help="seconds per notebook")
    parser.add_argument("--labs", type=Path, default=LABS_DIR, help="the course's labs folder")
    parser.add_argument("--hidden", type=Path, default=HIDDEN_DIR,
                        help="the folder of held-out cases, chNN.py (default grading/hidden)")
    parser.add_argument("--jobs", type=_jobs, default=1, help="notebooks graded at once (each in its own process)")
    parser.add_argument("--csv-dir", type=Path, default=Path("grades"),
                        help="where the CSV files and gradescope/<submission>/results.json go")
    parser.add_argument("--results-json", type=Path,
                        help="also write the (single) submission's Gradescope results here, e.g. "
                             "/autograder/results/results.json")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.labs.is_dir() or not any(args.labs.glob("*.ipynb")):
        parser.error(f"--labs {args.labs}: not a folder of lab notebooks")
    if not args.hidden.is_dir():
        parser.error(f"--hidden {args.hidden}: no such folder")
    if args.one:  # the child process: grade one notebook, write its score as JSON
        if args.result_fd is None:
            parser.error("--one needs --result-fd")
        os.set_inheritable(args.result_fd, False)  # not for the kernel, nor anything it starts
        try:
            result = grade_notebook(args.one, labs_dir=args.labs, time_limit_s=args.time_limit,
                                    hidden_dir=args.hidden)
        except Exception as exc:  # a grader bug or a broken lab: a score with the reason, not a silent death
            result = _zeroed(args.one, args.labs, f"the grader failed: {type(exc).__name__}: {exc}"[:300])
        with os.fdopen(args.result_fd, "wb") as pipe:
            pipe.write(json.dumps(asdict(result)).encode())
        return 0
    if not args.paths:
        parser.error("name at least one submitted notebook or folder")
    try:
        paths = collect(args.paths)
    except ValueError as exc:
        parser.error(str(exc))
    if not paths:
        parser.error("no notebooks found in " + ", ".join(map(str, args.paths)))
    if args.results_json is not None and len(paths) != 1:
        parser.error(f"--results-json takes one submission, got {len(paths)}")
    if args.csv_dir.exists() and not args.csv_dir.is_dir():
        parser.error(f"--csv-dir {args.csv_dir}: exists and is not a folder")
    stale = clear_previous(args.csv_dir)
    if stale:
        print(f"cleared {stale} file(s) of the previous run from {args.csv_dir}/ (use --csv-dir to keep runs apart)")
    print(f"grading {len(paths)} notebook(s), {args.jobs} at a time, {args.time_limit:g} s each at most", end="",
          flush=True)
    started = time.monotonic()
    labs, hidden = args.labs.resolve(), args.hidden.resolve()
    roots = [REPO_ROOT / "utils", REPO_ROOT / "grading", labs, hidden]
    roots = [r for r in roots if not any(r != o and r.is_relative_to(o) for o in roots)]  # each file once
    files, lock, running, suspects = _trusted_files(roots), threading.Lock(), set(), set()
    caches: dict[Path, tuple[int, int]] = {}
    _forged_caches(roots, caches)  # a cache planted before this run is deleted too
    adopted = _adopt_orphans()
    not_dumpable()  # a submission's kernel cannot ptrace the grader or take its descriptors (review s11 K9)
    server = None if os.environ.get(FORKSERVER_ENV) == "0" or len(paths) < 2 else ForkServer.start(
        "utils.course.grade:main", GRADING_PRELOAD, env={k: v for k, v in os.environ.items() if k != STRICT_ENV},
        cwd=str(REPO_ROOT))
    if server is not None:
        _RUNNING.add(server.process.pid)  # not a leftover: `_stop_leftovers` spares it
    print(", each in a process forked from one that imported torch and the checks" if server is not None else
          ", each in a process started afresh", flush=True)

    def grade(path: Path) -> tuple[SubmissionScore, list[str]]:
        """The submission's score, and the trusted files found changed once it is done (put back): every submission
        graded meanwhile becomes a suspect."""
        nonlocal server  # set to None once it cannot be trusted (review s11 K1)
        with lock:
            running.add(path)
        score = _grade_in_child(path.resolve(), labs, args.time_limit, hidden, server)
        with lock:
            if adopted:
                _stop_leftovers()
            touched = _restore_trusted(files, roots) + _forged_caches(roots, caches)
            if server is not None and not server.clean():  # data on its socket that no request asked for (K1)
                print(f"{path.name}: the fork server's socket held data no request asked for, or the server died; "
                      "the rest is graded in processes started afresh, and the notebooks graded meanwhile again",
                      flush=True)
                server.close()
                _RUNNING.discard(server.process.pid)
                server = None
                suspects.update(running)
            if touched:
                suspects.update(running)
            running.discard(path)
        return score, touched

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            scores = [score for score, _ in pool.map(grade, paths)]
        for i, path in enumerate(paths):  # graded again one at a time: the one that changes the files again scores 0
            if path in suspects:
                scores[i], touched = grade(path)
                if touched:
                    scores[i] = _tampered(path, labs, touched)
                    print(f"{path.name}: {scores[i].notes[-1]}", flush=True)
    finally:
        if server is not None:
            server.close()
            _RUNNING.discard(server.process.pid)
        if adopted:
            _stop_leftovers()  # a grading child that outlived the server came to this process: reap it (review s11 K5)
    try:
        print("\n" + report(scores, args.csv_dir))
        write_gradescope(scores, args.csv_dir / "gradescope")
        if args.results_json is not None:
            args.results_json.parent.mkdir(parents=True, exist_ok=True)
            args.results_json.write_text(json.dumps(gradescope_results(scores[0], time.monotonic() - started),
                                                    indent=1), encoding="utf-8")
    except OSError as exc:
        print(f"python -m utils.course.grade: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"\nCSV written to {args.csv_dir}/, Gradescope results to {args.csv_dir / 'gradescope'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
