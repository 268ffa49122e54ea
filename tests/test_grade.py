"""Grading planted submissions of every kind, through the command line, as an instructor would.

One grading run (module fixture, two at a time) covers: every solution (full marks, held-out cases included),
every untouched lab ("not attempted"), the hostile submissions (loop, exit, killed kernel, faked output, deleted or
edited checks, huge output), an answer tuned to the public cases, an answer over its memory cap, broken metadata,
and a fixture chapter lab with a predict exercise and an open challenge (tests/test_grading_fixture.py builds it).
"""

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.escapes import DENIED_REASONING, STACK_WALK
from tests.test_grading_fixture import FIXTURE, build_fixture_course
from utils.course.checks.protocol import READ_BY_HAND
from utils.course.grade import collect, find_lab, for_instructor, gradescope_results, main, prepare, score
from utils.course.labs import course_metadata, lab_exercises

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labs" / "lab00_warmup.ipynb"
SOLUTION = ROOT / "solutions" / "lab00_warmup.ipynb"

RIGHT = {
    "0.1": ("def packed_bytes(shape, bits):\n    rows = 1\n    for s in shape[:-1]:\n        rows *= s\n"
            "    return rows * (((shape[-1] if shape else 1) * bits + 7) // 8)"),
    "0.2": ("def saved_state_bytes(state):\n"
            "    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.values()}\n"
            "    return sum(seen.values())"),
    "0.3": ("def format_bytes(n):\n    value, unit = n, 0\n    while value >= 1024 and unit < 4:\n"
            "        value, unit = value / 1024, unit + 1\n"
            "    return f'{n} B' if unit == 0 else f'{value:.2f} ' + ['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]"),
    "0.4": ("prediction = 262144\nreasoning = 'the slice is a view, contiguous copies it and the cast halves it'\n"
            "def new_storage_bytes(fn, x):\n    y = fn(x)\n"
            "    same = y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()\n"
            "    return 0 if same else y.untyped_storage().nbytes()"),
}
FULL = {"0.1": 1, "0.2": 1, "0.3": 2, "0.4": 1}  # 0.4: the value; its reasoning is read by hand (1)
NONE = dict.fromkeys(FULL, 0)
WRONG_02 = "def saved_state_bytes(state):\n    return sum(t.numel() * t.element_size() for t in state.values()) * 2"
RIGHT_02_ALONE = RIGHT["0.2"]
# Tuned to the public cases: each passes them and fails the held-out ones.
TUNED = {
    "0.1": RIGHT["0.1"].replace("if shape else 1", "if shape else 0"),  # a 0-d tensor taken as empty
    "0.2": RIGHT_02_ALONE,
    "0.3": RIGHT["0.3"].replace(">= 1024", "> 1024"),  # 1024 bytes shown as '1024 B'
    "0.4": ("prediction = 262144\nreasoning = 'the slice is a view, contiguous copies it and the cast halves it'\n"
            "def new_storage_bytes(fn, x):\n    y = fn(x)\n"
            "    return 0 if y.data_ptr() == x.data_ptr() else y.numel() * y.element_size()"),
}
# 1 GiB of address space (never touched, so harmless without a cap): over 0.4's 256 MiB cap.
OVER_CAP = {**RIGHT, "0.4": RIGHT["0.4"].replace("    y = fn(x)\n", "    scratch = torch.empty(2**28)\n"
                                                                      "    y = fn(x)\n")}
FAKE = """from IPython.display import display
from utils.course.checks.core import CHECK_MIME, Verdict
import utils.course.checks.warmup as w
print("Exercise 0.1: PASSED (1/1) well done.")
for ex in ("0.1", "0.2", "0.3", "0.4"):
    display({CHECK_MIME: {"exercise": ex, "status": "passed", "message": "", "points": 2, "max_points": 2,
             "nonce": ""}, "text/plain": "Exercise: PASSED"}, raw=True)
w.check_packed_bytes = lambda f: Verdict("0.1", "passed", "faked", 1.0, 1.0)
w.check_saved_state_bytes = lambda f: Verdict("0.2", "passed", "faked", 1.0, 1.0)
check_packed_bytes = w.check_packed_bytes
check_saved_state_bytes = w.check_saved_state_bytes"""


def submission(answers: dict[str, str], *, extra_cell: str | None = None, after: str = "0.1",
               drop_checks: bool = False, edit_checks: str | None = None) -> nbformat.NotebookNode:
    nb = nbformat.read(LAB, as_version=4)
    cells = []
    for cell in nb.cells:
        course = cell.metadata.get("course", {})
        if "check" in course and drop_checks:
            continue
        if "check" in course and edit_checks is not None:
            cell.source = edit_checks
        if course.get("exercise") in answers:
            cell.source = answers[course["exercise"]]
        cells.append(cell)
        if extra_cell is not None and course.get("exercise") == after:
            cells.append(nbformat.v4.new_code_cell(extra_cell))
    nb.cells = cells
    return nb


PLANTED = {
    # 0.1 raises, 0.2 is wrong, a cell fails, and 0.4 goes over its memory cap: each part scores alone
    "partly_correct_raising_over_cap": (
        submission({**OVER_CAP, "0.1": "def packed_bytes(shape, bits):\n    return 1 / 0", "0.2": WRONG_02},
                   extra_cell="raise RuntimeError('a cell that fails')"),
        {**FULL, "0.1": 0, "0.2": 0, "0.4": 0}),
    # a loop that never ends (sleeping, so that it costs the test run wall time, not CPU)
    "infinite_loop": (submission(RIGHT, extra_cell="import time\nwhile True:\n    time.sleep(0.5)"),
                      {**NONE, "0.1": 1}),
    # an answer that calls sys.exit (0.1), and (B2 of the review) a reasoning that says it did not reason (0.4): the
    # value still earns its points, and the reasoning is listed, with its text, for the instructor (who gives its
    # point by hand)
    "exit_in_answer_reasoning_denied": (submission({**RIGHT, "0.1": "import sys\ndef packed_bytes(shape, bits):\n"
                                                                    "    sys.exit(1)", "0.2": RIGHT_02_ALONE,
                                                    "0.4": RIGHT["0.4"].replace(
        "'the slice is a view, contiguous copies it and the cast halves it'", repr(DENIED_REASONING))}),
                                        {**FULL, "0.1": 0}),
    "kernel_killed": (submission(RIGHT, extra_cell="import os\nos._exit(0)"), {**NONE, "0.1": 1}),
    "deleted_checks_sys_exit_huge_output": (
        submission(RIGHT, drop_checks=True, extra_cell="import sys\ntry:\n    sys.exit(3)\nfinally:\n"
                                                       "    for _ in range(40):\n        print('x' * 100_000)"),
        FULL),
    "edited_checks": (submission({}, edit_checks="print('Exercise 0.1: PASSED')"), NONE),
    "faked_passed": (submission({"0.1": "def packed_bytes(shape, bits):\n    return 0"}, extra_cell=FAKE), NONE),
    "tuned_to_public": (submission(TUNED), {"0.1": 0.5, "0.2": 1, "0.3": 1, "0.4": 0.5}),
    # right answers, plus an import of what a check compares answers with: nothing autograded counts
    "imports_reference": (submission(RIGHT, extra_cell="from utils.course.checks.warmup import predict_target"),
                          NONE),
}


# The untouched labs graded here: one of each way the grader runs a check (calls answered in an answer process: 00;
# scenes observed there: 04's training step and its scaler, 09's peak) and the fixture's challenge. That every
# check of every lab refuses the placeholders' None and `...` is tested in-process (tests/test_check_gaming.py).
UNTOUCHED = {"lab00_warmup", "lab04_automatic_mixed_precision", "lab09_capstone_fit_a_model", FIXTURE}


# Review s15's red team, A7: while the learner's answer runs (in the grader's answer process, inside the check's
# scene), it replaces the scene module's meter, which the scene reads after the call. Graded inside lab 07's
# stack-walk submission (a notebook fewer to grade): 7.3's loop, which also leaves its gradients behind.
SCENE_TAMPER = """def train_and_log(model, opt, batches):
    import sys
    scene = sys.modules.get("utils.course.scenes.ch07")
    if scene is not None:
        scene.graph_held_bytes = lambda *args, **kwargs: 0
    history = {"loss": [], "saliency": []}
    for x, y in batches:
        opt.zero_grad()
        x = x.detach().requires_grad_(True)
        hidden = model[1](model[0](x))
        loss = F.mse_loss(model[2](hidden), y)
        loss.backward()
        opt.step()
        history["loss"].append(loss.item())
        history["saliency"].append(x.grad.abs().mean().item())
        model.last_hidden_norm = hidden.detach().norm().item()
    return history
"""


def scene_tamper(folder: Path) -> None:
    """Lab 07's stack-walk submission with SCENE_TAMPER as its 7.3 answer."""
    path = folder / "stack_walk_lab07_memory_profiling.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if course_metadata(cell).get("exercise") == "7.3":
            cell.source = SCENE_TAMPER
    nbformat.write(nb, path)


def stack_walk_notebooks(labs: Path, folder: Path) -> dict[str, list[str]]:
    """A submission per lab with exercises in tests/escapes.py's STACK_WALK (the review's cheats that read a
    check's expected value or reference from the stack), its other exercises left as handed out:
    {lab: cheated exercises}."""
    cheated: dict[str, list[str]] = {}
    for lab_path in sorted(labs.glob("lab*.ipynb")):
        nb = nbformat.read(lab_path, as_version=4)
        for cell in nb.cells:
            exercise = course_metadata(cell).get("exercise")
            if exercise in STACK_WALK:
                cell.source = STACK_WALK[exercise]
                cheated.setdefault(lab_path.stem, []).append(exercise)
        if lab_path.stem in cheated:
            nbformat.write(nb, folder / f"stack_walk_{lab_path.name}")
    return cheated


def _grade(folder: Path, out: Path, labs: Path, hidden: Path, time_limit: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "utils.course.grade", str(folder), "--time-limit", str(time_limit), "--jobs", "1",
           "--csv-dir", str(out), "--labs", str(labs), "--hidden", str(hidden)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Two grading runs side by side, one notebook at a time each: the planted lab-00 submissions (a short time
    limit, for the infinite loop) and every solution and untouched lab (a generous one).
    Returns {lab: {submission: CSV row}}, the printed reports, and the folders."""
    tmp = tmp_path_factory.mktemp("grading")
    labs, hidden, solutions = build_fixture_course(tmp)
    planted, course = tmp / "planted", tmp / "course"
    planted.mkdir()
    course.mkdir()
    for name, (nb, _) in PLANTED.items():
        nbformat.write(nb, planted / f"{name}_lab00_warmup.ipynb")
    (planted / "not_a_notebook_lab00_warmup.ipynb").write_text("{ this is not json")
    shutil.copy(SOLUTION, planted / "alice_00.ipynb")  # renamed, and solutions carry no course.lab metadata
    odd = nbformat.read(SOLUTION, as_version=4)
    odd.metadata["course"] = ["not", "a", "mapping"]
    nbformat.write(odd, planted / "metadata_list_lab00_warmup.ipynb")
    stack_walk = stack_walk_notebooks(labs, planted)
    scene_tamper(planted)
    for path in sorted(solutions.glob("*.ipynb")):
        shutil.copy(path, course / f"solution_{path.name}")
        if path.stem in UNTOUCHED:
            shutil.copy(labs / path.name, course / f"untouched_{path.name}")
    runs = [_grade(planted, tmp / "grades-planted", labs, hidden, 60),
            _grade(course, tmp / "grades-course", labs, hidden, 240)]
    try:
        printed = [run.communicate(timeout=1500)[0] for run in runs]
    finally:
        for run in runs:
            run.kill()
    assert [run.returncode for run in runs] == [0, 0], printed
    rows = {}
    for out in (tmp / "grades-planted", tmp / "grades-course"):
        for path in out.glob("*.csv"):
            with open(path, newline="") as f:
                rows.setdefault(path.stem, {}).update({r["submission"]: r for r in csv.DictReader(f)})
    return {"rows": rows, "printed": "\n".join(printed), "planted": tmp / "grades-planted", "stack_walk": stack_walk,
            "course": tmp / "grades-course", "solutions": solutions, "labs": labs}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_planted_submissions_get_the_scores_they_deserve(graded):
    rows = graded["rows"]["lab00_warmup"]
    for name, (_, expected) in PLANTED.items():
        row = rows[f"{name}_lab00_warmup.ipynb"]
        got = {ex: float(row[f"ex {ex}"]) for ex in expected}
        assert got == expected, f"{name}: {got} != {expected}; notes: {row['notes']}"
        assert float(row["max"]) == 5
    assert "time limit" in rows["infinite_loop_lab00_warmup.ipynb"]["notes"]
    # both runs graded through the fork server (utils/course/forkserver.py), which then did not fail over (review s11
    # K7)
    assert graded["printed"].count("each in a process forked from one that imported torch and the checks") == 2
    assert "socket held data no request asked for" not in graded["printed"]
    assert "kernel died" in rows["kernel_killed_lab00_warmup.ipynb"]["notes"]
    assert "sys.exit" in rows["exit_in_answer_reasoning_denied_lab00_warmup.ipynb"]["notes"]
    assert "dropped" in rows["deleted_checks_sys_exit_huge_output_lab00_warmup.ipynb"]["notes"]
    notes = rows["partly_correct_raising_over_cap_lab00_warmup.ipynb"]["notes"]
    assert "ex 0.1: error: public cases: error: your code raised ZeroDivisionError" in notes, notes
    assert "ex 0.2: failed" in notes and "ex 0.3" not in notes, notes  # 0.2 wrong on its own
    assert "not a readable notebook" in graded["printed"] and "not_a_notebook_lab00_warmup.ipynb" in graded["printed"]
    assert "Lab lab00_warmup" in graded["printed"]
    assert "Points per exercise: 0.1: 1, 0.2: 1, 0.3: 2, 0.4: 1; 0.4 reasoning: 1 read and graded by hand" in \
        graded["printed"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_answer_tuned_to_the_public_cases_loses_the_held_out_half(graded):
    notes = graded["rows"]["lab00_warmup"]["tuned_to_public_lab00_warmup.ipynb"]["notes"]
    for ex in ("0.1", "0.3", "0.4"):
        assert f"ex {ex}: partial: public cases: passed | held-out cases: failed: expected" in notes, notes
    assert "format_bytes(1_024)" in notes  # the failing held-out case is named
    folder = graded["planted"] / "gradescope" / "tuned_to_public_lab00_warmup"
    results = json.loads((folder / "results.json").read_text())
    held = {t["number"]: t for t in results["tests"]}
    assert held["0.3"]["score"] == 1 and held["0.3.h"]["score"] == 0 and held["0.3.h"]["max_score"] == 1
    out = held["0.3.h"]["output"]  # the learner sees that a held-out case failed, not the case (review 34c, M1)
    assert held["0.3.h"]["visibility"] == "after_published" and out.startswith("held-out cases: failed")
    assert "format_bytes(" not in out and "expected one on a case you were not shown" in out


def test_the_learner_sees_no_held_out_case_and_the_instructor_does() -> None:
    from utils.course.grade import ExerciseScore, SubmissionScore, _lost, gradescope_results

    reason = ("public cases: passed | held-out cases: failed: expected packed_bytes((), bits=32) = 4, got -7")
    e = ExerciseScore("0.2", 1.0, 2.0, "partial", reason, public="passed", hidden="failed", hidden_max=1.0)
    s = SubmissionScore("a.ipynb", "lab00_warmup", [e])
    tests = {t["number"]: t for t in gradescope_results(s)["tests"]}
    assert "packed_bytes" not in tests["0.2.h"]["output"] and "-7" not in tests["0.2.h"]["output"]
    assert any("packed_bytes((), bits=32) = 4" in line for line in _lost(s))  # the CSV notes column
    watched = "public cases: passed | held-out cases: failed: got a call to reference_round"
    e = ExerciseScore("2.2", 1.0, 2.0, "partial", watched, public="passed", hidden="failed", hidden_max=1.0)
    tests = {t["number"]: t for t in gradescope_results(SubmissionScore("a", "lab02", [e]))["tests"]}
    assert tests["2.2.h"]["output"] == "held-out cases: failed: got a call to reference_round"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_answer_over_its_memory_cap_scores_zero_with_the_reason(graded):
    row = graded["rows"]["lab00_warmup"]["partly_correct_raising_over_cap_lab00_warmup.ipynb"]
    assert "ex 0.4: over memory cap: the answer ran out of its memory cap (256 MiB" in row["notes"], row["notes"]
    assert "allocate" in row["notes"]  # torch's failed allocation, named
    assert "kernel died" not in row["notes"] and "time limit" not in row["notes"]  # the rest of the lab went on


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_solution_earns_full_marks_and_every_lab_none(graded):
    """Each solution graded as a submission scores full marks (held-out cases included); each untouched lab graded
    (UNTOUCHED) scores 0 with every exercise 'not attempted'; challenges are listed as graded by hand."""
    for path in sorted(graded["solutions"].glob("*.ipynb")):
        rows = graded["rows"][path.stem]
        solved = rows[f"solution_{path.name}"]
        assert solved["total"] == solved["max"] != "0", (path.name, solved["notes"])
        if path.stem not in UNTOUCHED:
            continue
        untouched = rows[f"untouched_{path.name}"]
        assert untouched["total"] == "0", (path.name, untouched["notes"])
        auto = [k for k in untouched if k.startswith("ex ") and "by hand" not in k]
        assert untouched["notes"].count("not attempted") == len(auto), untouched["notes"]
        assert "run that cell" not in untouched["notes"], "the instructor's CSV speaks to the learner"
        assert all(untouched[k] == "by hand" for k in untouched if "by hand, max" in k)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_chapter_lab_with_a_challenge_is_graded_and_exported(graded):
    rows = graded["rows"][FIXTURE]
    solved = rows[f"solution_{FIXTURE}.ipynb"]
    assert solved["ex 42.3 (by hand, max 3)"] == "by hand" and solved["by hand max"] == "4"  # and 42.2's reasoning
    assert (solved["total"], solved["max"]) == ("3", "3")  # 42.2's reasoning: 1 more point, by hand
    assert "42.3: 3 graded by hand (rubric)" in graded["printed"]
    results = json.loads((graded["course"] / "gradescope" / f"solution_{FIXTURE}" / "results.json").read_text())
    assert results["score"] == 3 and math.isclose(sum(t["max_score"] for t in results["tests"]), 3)
    challenge = next(t for t in results["tests"] if t["number"] == "42.3")
    assert challenge["max_score"] == 0 and "graded by hand" in challenge["name"]
    assert "accumulate in FP32" in challenge["output"]  # the learner's answer, for the hand grader
    for test in results["tests"]:
        assert set(test) <= {"name", "number", "score", "max_score", "visibility", "status", "output"}
        assert test["visibility"] in {"visible", "after_published"}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_renamed_solution_is_graded_in_full(graded):
    row = graded["rows"]["lab00_warmup"]["alice_00.ipynb"]
    assert row["total"] == row["max"] == "5", row["notes"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_answers_that_walk_the_stack_score_zero(graded):
    """B1 of the review: answers that read a check's expected value or reference from the interpreter's stack
    (inspect.stack(), a frame's f_globals, getargvalues) passed before; the learner's call now runs where no frame or
    module holds a check, so they score 0, held-out cases included, and their cells are listed to read by hand."""
    assert sorted(e for found in graded["stack_walk"].values() for e in found) == sorted(STACK_WALK)
    for lab, exercises in graded["stack_walk"].items():
        row = graded["rows"][lab][f"stack_walk_{lab}.ipynb"]
        for exercise in exercises:
            assert row[f"ex {exercise}"] == "0", (lab, exercise, row["notes"])
            assert f"exercise {exercise} uses inspect" in row["read by hand"], row["read by hand"]
        assert row["total"] == "0", (lab, row["notes"])


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_meter_replaced_inside_a_scene_scores_zero(graded):
    """Review s15's red team, A7: a plain forward with the scene module's saved-bytes meter replaced from inside the
    learner's call earned 5.4's 3 points; the answer process now reports the replacement (here, 7.3's graph meter)."""
    row = graded["rows"]["lab07_memory_profiling"]["stack_walk_lab07_memory_profiling.ipynb"]
    assert row["ex 7.3"] == "0", row["notes"]
    assert "utils.course.scenes.ch07.graph_held_bytes" in row["notes"], row["notes"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_reasoning_is_read_by_hand_not_counted(graded):
    """B2 of the review: a reasoning earns nothing by itself; each one is listed with its text for the instructor,
    marked where it names fewer than two of the exercise's quantities; the value keeps its autograded points."""
    rows = graded["rows"]["lab00_warmup"]
    denied = rows["exit_in_answer_reasoning_denied_lab00_warmup.ipynb"]
    column = "ex 0.4 reasoning (by hand, max 1)"
    assert denied[column] == "by hand" and float(denied["ex 0.4"]) == 1, denied["notes"]  # the value keeps its point
    assert (denied["total"], denied["max"]) == ("4", "5"), denied["notes"]  # 0.1 called sys.exit
    assert DENIED_REASONING in denied["read by hand"] and READ_BY_HAND in denied["read by hand"], denied
    solved = rows["alice_00.ipynb"]
    assert "ex 0.4 reasoning (by hand, max 1): 'The slice is a view" in solved["read by hand"], solved
    assert READ_BY_HAND not in solved["read by hand"]
    assert "left as handed out" in rows["edited_checks_lab00_warmup.ipynb"]["read by hand"]


def test_a_new_run_clears_the_previous_runs_files(tmp_path):
    from utils.course.grade import clear_previous

    (tmp_path / "gradescope" / "old").mkdir(parents=True)
    (tmp_path / "gradescope" / "old" / "results.json").write_text("{}")
    (tmp_path / "unknown.csv").write_text("stale")
    (tmp_path / "notes.txt").write_text("the instructor's own file")
    assert clear_previous(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["gradescope", "notes.txt"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_submission_whose_course_metadata_is_not_a_mapping_is_reported(graded):
    row = graded["rows"]["lab00_warmup"]["metadata_list_lab00_warmup.ipynb"]
    assert row["total"] == "5", row["notes"]
    assert "metadata `course` is a list, not a mapping" in row["notes"]


def test_prepare_replaces_checks_with_the_graders_own():
    nb, owned, exercises = prepare(submission(RIGHT, edit_checks="print('PASSED')"), nbformat.read(LAB, as_version=4),
                                   nonce="n0")
    assert {e.id: e.points for e in exercises} == {"0.1": 1.0, "0.2": 1.0, "0.3": 2.0, "0.4": 2.0}
    assert sorted(owned.values()) == ["0.1", "0.2", "0.3", "0.4"]
    sources = [c.source for c in nb.cells]
    assert "print('PASSED')" not in sources
    ids = [c.id for c in nb.cells]
    for cell_id, ex in owned.items():  # each check sits right after its exercise, and loads the hidden cases
        exercise_cell = nb.cells[ids.index(cell_id) - 1]
        assert exercise_cell.metadata["course"]["exercise"] == ex
        assert "grading/hidden/ch00.py" in nb.cells[ids.index(cell_id)].source
        assert "nonce='n0'" in nb.cells[ids.index(cell_id)].source


def test_the_memory_caps_warm_up_builds_an_optimizer_only_where_the_lab_names_one():
    """An optimizer's first construction imports torch._dynamo (about a second and 67 MiB of address space): the
    grader's warm-up before a memory cap does it where the lab's code, checks or held-out cases name torch.optim
    (so that an answer that trains does not pay it inside its cap), and skips it for lab 00, which trains nothing.
    That the cap still catches an answer over it: test_an_answer_over_its_memory_cap_scores_zero_with_the_reason."""
    def warm(lab: Path) -> set[str]:
        nb, owned, _ = prepare(nbformat.read(lab, as_version=4), nbformat.read(lab, as_version=4), nonce="n")
        return {c.source.rpartition("warm_optimizer=")[2].split(")")[0] for c in nb.cells if c.id in owned}

    assert warm(LAB) == {"False"}
    assert warm(ROOT / "labs" / "lab07_memory_profiling.ipynb") == {"True"}
    edited = nbformat.read(LAB, as_version=4)
    edited.cells.append(nbformat.v4.new_code_cell("opt = torch.optim.SGD(model.parameters(), lr=0.1)"))
    nb, owned, _ = prepare(edited, nbformat.read(LAB, as_version=4), nonce="n")
    assert all("warm_optimizer=True" in c.source for c in nb.cells if c.id in owned)  # the learner's own optimizer


def test_score_reads_only_this_runs_verdicts():
    nb, owned, exercises = prepare(submission(RIGHT), nbformat.read(LAB, as_version=4), nonce="right")
    fake = {"exercise": "0.1", "status": "passed", "points": 1, "max_points": 1, "message": "", "nonce": "wrong"}
    for cell in nb.cells:
        if owned.get(cell.get("id")) == "0.1":
            cell.outputs = [nbformat.v4.new_output("display_data", data={"application/vnd.gpu-memory-course."
                                                                         "check+json": fake})]
    scores = {s.exercise: s for s in score(nb, owned, exercises, "right")}
    assert scores["0.1"].points == 0 and scores["0.1"].status == "error"


def test_importing_a_checks_reference_is_reported():
    from utils.course.grade import reference_imports

    lab = nbformat.read(LAB, as_version=4)
    assert reference_imports(nbformat.read(SOLUTION, as_version=4), lab) == []
    cheat = nbformat.read(SOLUTION, as_version=4)
    cheat.cells.append(nbformat.v4.new_code_cell("import utils.course.checks.ch02 as c\nfrom grading.hidden import "
                                                 "ch02\n"
                                                 "from utils.course.checks.warmup import check_packed_bytes"))
    assert reference_imports(cheat, lab) == ["grading.hidden:ch02", "utils.course.checks.ch02"]
    cheat.cells.append(nbformat.v4.new_code_cell("import importlib\nm = "
                                                 "importlib.import_module('utils.course.checks.ch03')"))
    assert "utils.course.checks.ch03" in reference_imports(cheat, lab)
    ch04 = ROOT / "labs" / "lab04_automatic_mixed_precision.ipynb"  # its text offers RetrievalScorer to import
    looks = nbformat.read(ch04, as_version=4)
    looks.cells.append(nbformat.v4.new_code_cell("from utils.course.checks.ch04 import RetrievalScorer"))
    assert reference_imports(looks, nbformat.read(ch04, as_version=4)) == []
    # a string that names a check module is not an import (review 34c, M2: it zeroed the whole notebook)
    said = nbformat.read(SOLUTION, as_version=4)
    said.cells.append(nbformat.v4.new_code_cell("note = 'utils.course.checks holds the checks; grading the graders'"))
    assert reference_imports(said, lab) == []


def test_reasons_read_by_the_instructor_say_what_was_found(monkeypatch):
    from utils.course.checks.core import answered, run_check
    from utils.course.checks.protocol import STRICT_ENV

    monkeypatch.delenv(STRICT_ENV, raising=False)
    for body in (lambda: (_ for _ in ()).throw(NotImplementedError), lambda: answered(..., "prediction")):
        learner = run_check("1.1", body, points=1).message
        assert "run that cell, then this one." in learner  # the learner is told what to do next
        assert for_instructor(learner).endswith("(the answer was left as handed out).")


def test_gradescope_results_follow_the_spec():
    from utils.course.grade import ExerciseScore, SubmissionScore
    s = SubmissionScore("a.ipynb", "lab00_warmup", [
        ExerciseScore("0.1", 0.5, 1, "partial", "public cases: passed | held-out cases: failed: expected 1, got 2",
                      False, "passed", "failed", 0.5),
        ExerciseScore("0.2", 0, 2, "over memory cap", "the answer ran out of its memory cap", False, "error", "", 1),
        ExerciseScore("0.5", 0, 3, "graded by hand (rubric)", "open challenge", True)], ["a note"])
    results = gradescope_results(s, 12.34)
    assert results["score"] == 0.5 and results["execution_time"] == 12.3 and "a note" in results["output"]
    assert [(t["number"], t["score"], t["max_score"]) for t in results["tests"]] == [
        ("0.1", 0.5, 0.5), ("0.1.h", 0, 0.5), ("0.2", 0, 1), ("0.2.h", 0, 1), ("0.5", 0, 0)]
    held_out = results["tests"][1]["output"]  # the learner is not shown the case (review 34c, M1)
    assert held_out.startswith("held-out cases: failed") and "got 2" not in held_out
    assert "memory cap" in results["tests"][3]["output"]


def test_find_lab_and_collect_errors(tmp_path):
    nb = nbformat.read(LAB, as_version=4)
    assert find_lab(nb, tmp_path / "anything.ipynb") == LAB
    del nb.metadata["course"]
    assert find_lab(nb, tmp_path / "alice_lab00_warmup.ipynb") == LAB
    assert find_lab(nb, tmp_path / "alice.ipynb") == LAB  # from the exercise ids its cells carry
    for number in ("03", "06"):  # a solution renamed by a learner: no course.lab metadata, no lab name
        solution = nbformat.read(next((ROOT / "solutions").glob(f"lab{number}_*.ipynb")), as_version=4)
        assert find_lab(solution, tmp_path / f"alice_{number}.ipynb").name.startswith(f"lab{number}")
    for cell in nb.cells:
        cell.metadata.pop("course", None)
    with pytest.raises(ValueError, match="cannot tell which lab"):
        find_lab(nb, tmp_path / "alice.ipynb")
    nb.metadata["course"] = "lab00_warmup"
    with pytest.raises(ValueError, match="course` is a str, not a mapping"):
        find_lab(nb, tmp_path / "alice.ipynb")
    with pytest.raises(ValueError, match="not a notebook"):
        collect([tmp_path / "missing.txt"])
    with pytest.raises(TypeError, match="path"):
        collect([3])


@pytest.mark.parametrize(("args", "named"), [
    ([], "name at least one"),
    (["x.ipynb", "--time-limit", "nan"], "--time-limit"),
    (["x.ipynb", "--time-limit", "inf"], "--time-limit"),
    (["x.ipynb", "--time-limit", "-3"], "--time-limit"),
    (["x.ipynb", "--time-limit", "soon"], "--time-limit"),
    (["x.ipynb", "--jobs", "0"], "--jobs"),
    (["x.ipynb", "--jobs", "1.5"], "--jobs"),
    (["no-such-file.ipynb"], "no-such-file.ipynb"),
    ([str(LAB), "--labs", "no-such-folder"], "no-such-folder"),
    ([str(LAB), "--hidden", "no-such-folder"], "no-such-folder"),
    ([str(LAB), "--csv-dir", str(LAB)], "--csv-dir"),
    ([str(ROOT / "labs"), "--results-json", "r.json"], "--results-json"),
])
def test_bad_command_lines_exit_with_one_line_naming_the_argument(args, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "\n" not in err and "Traceback" not in err, err


def test_exercise_metadata_of_lab_00():
    exercises = lab_exercises(nbformat.read(SOLUTION, as_version=4), "lab00_warmup")
    assert [(e.id, e.kind, e.points) for e in exercises] == [
        ("0.1", "warm-up", 1), ("0.2", "warm-up", 1), ("0.3", "debug", 2), ("0.4", "predict", 2)]
    assert exercises[3].memory_limit_mb == 256


@pytest.mark.slow
def test_without_the_fork_server_each_notebook_is_graded_in_a_process_of_its_own(tmp_path):
    """COURSE_GRADE_FORKSERVER=0 (and any platform without pidfds) grades a folder in processes started afresh, as
    before the fork server (review s11 K7: the only other multi-notebook runs go through the server)."""
    import os

    for name in ("a", "b"):
        shutil.copy(LAB, tmp_path / f"{name}_lab00_warmup.ipynb")
    done = subprocess.run([sys.executable, "-m", "utils.course.grade", str(tmp_path), "--jobs", "2", "--time-limit",
                           "120",
                           "--csv-dir", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COURSE_GRADE_FORKSERVER": "0"})
    assert done.returncode == 0 and "each in a process started afresh" in done.stdout, done.stdout + done.stderr
    with open(tmp_path / "out" / "lab00_warmup.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["total"] for r in rows] == ["0", "0"] and all("not attempted" in r["notes"] for r in rows)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
