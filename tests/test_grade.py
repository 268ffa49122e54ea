"""Grading planted submissions of every kind, through the command line, as an instructor would."""

import csv
import sys
from pathlib import Path

import nbformat
import pytest

from utils.grade import collect, find_lab, main, prepare

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labs" / "00_warmup.ipynb"
SOLUTION = ROOT / "solutions" / "00_warmup.ipynb"

RIGHT = {
    "0.1": "def tensor_bytes(t):\n    return t.numel() * t.element_size()",
    "0.2": "def unique_parameter_bytes(model):\n    return sum(tensor_bytes(p) for p in model.parameters())",
}
WRONG_02 = ("def unique_parameter_bytes(model):\n"
            "    return sum(tensor_bytes(p) for m in model.modules() for p in m.parameters(recurse=False)"
            " if True) * 2")
RIGHT_02_ALONE = ("def unique_parameter_bytes(model):\n"
                  "    return sum(p.numel() * p.element_size() for p in model.parameters())")
FAKE = """from IPython.display import display
from utils.checks.core import CHECK_MIME, Verdict
import utils.checks.warmup as w
print("Exercise 0.1: PASSED (1/1) well done.")
display({CHECK_MIME: {"exercise": "0.1", "status": "passed", "message": "", "points": 1, "max_points": 1},
         "text/plain": "Exercise 0.1: PASSED"}, raw=True)
w.check_tensor_bytes = lambda f: Verdict("0.1", "passed", "faked", 1.0, 1.0)
w.check_unique_parameter_bytes = lambda f: Verdict("0.2", "passed", "faked", 1.0, 1.0)
check_tensor_bytes = w.check_tensor_bytes
check_unique_parameter_bytes = w.check_unique_parameter_bytes"""


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
    "correct": (submission(RIGHT), {"0.1": 1, "0.2": 1}),
    "partly_correct": (submission({**RIGHT, "0.2": WRONG_02}), {"0.1": 1, "0.2": 0}),
    "unanswered": (submission({}), {"0.1": 0, "0.2": 0}),
    "raising": (submission({"0.1": "def tensor_bytes(t):\n    return 1 / 0", "0.2": RIGHT_02_ALONE},
                           extra_cell="raise RuntimeError('a cell that fails')"), {"0.1": 0, "0.2": 1}),
    "infinite_loop": (submission(RIGHT, extra_cell="while True:\n    pass"), {"0.1": 1, "0.2": 0}),
    "sys_exit": (submission(RIGHT, extra_cell="import sys\nsys.exit(3)"), {"0.1": 1, "0.2": 1}),
    "exit_in_answer": (submission({"0.1": "import sys\ndef tensor_bytes(t):\n    sys.exit(1)", "0.2": RIGHT_02_ALONE}),
                       {"0.1": 0, "0.2": 1}),
    "kernel_killed": (submission(RIGHT, extra_cell="import os\nos._exit(0)"), {"0.1": 1, "0.2": 0}),
    "deleted_checks": (submission(RIGHT, drop_checks=True), {"0.1": 1, "0.2": 1}),
    "edited_checks": (submission({}, edit_checks="print('Exercise 0.1: PASSED')"), {"0.1": 0, "0.2": 0}),
    "faked_passed": (submission({"0.1": "def tensor_bytes(t):\n    return 0"}, extra_cell=FAKE),
                     {"0.1": 0, "0.2": 0}),
    "huge_output": (submission(RIGHT, extra_cell="for _ in range(40):\n    print('x' * 100_000)"),
                    {"0.1": 1, "0.2": 1}),
}


@pytest.mark.slow
def test_planted_submissions_get_the_scores_they_deserve(tmp_path, capsys):
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name, (nb, _) in PLANTED.items():
        nbformat.write(nb, folder / f"{name}_00_warmup.ipynb")
    (folder / "not_a_notebook_00_warmup.ipynb").write_text("{ this is not json")
    assert main([str(folder), "--time-limit", "25", "--jobs", "2", "--csv-dir", str(tmp_path / "grades")]) == 0
    out = capsys.readouterr().out
    with open(tmp_path / "grades" / "00_warmup.csv", newline="") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    for name, (_, expected) in PLANTED.items():
        row = rows[f"{name}_00_warmup.ipynb"]
        got = {ex: float(row[f"ex {ex}"]) for ex in expected}
        assert got == expected, f"{name}: {got} != {expected}; notes: {row['notes']}"
    assert "not attempted" in rows["unanswered_00_warmup.ipynb"]["notes"]
    assert "time limit" in rows["infinite_loop_00_warmup.ipynb"]["notes"]
    assert "kernel died" in rows["kernel_killed_00_warmup.ipynb"]["notes"]
    assert "sys.exit" in rows["exit_in_answer_00_warmup.ipynb"]["notes"]
    assert "dropped" in rows["huge_output_00_warmup.ipynb"]["notes"]
    assert "ZeroDivisionError" in rows["raising_00_warmup.ipynb"]["notes"]
    assert "expected" in rows["partly_correct_00_warmup.ipynb"]["notes"]
    assert "not a readable notebook" in out
    assert "Lab 00_warmup" in out and "| correct_00_warmup.ipynb" in out


@pytest.mark.slow
def test_every_solution_earns_full_marks_and_every_lab_none(tmp_path):
    """Each solution graded as a submission scores full marks; each untouched lab scores 0, 'not attempted'."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    for path in solutions:
        (folder / f"solution_{path.name}").write_text(path.read_text())
        (folder / f"untouched_{path.name}").write_text((ROOT / "labs" / path.name).read_text())
    assert main([str(folder), "--jobs", "2", "--csv-dir", str(tmp_path / "grades")]) == 0
    for path in solutions:
        rows = {r["submission"]: r for r in csv.DictReader(open(tmp_path / "grades" / f"{path.stem}.csv"))}
        solved, untouched = rows[f"solution_{path.name}"], rows[f"untouched_{path.name}"]
        assert solved["total"] == solved["max"] != "0", (path.name, solved["notes"])
        assert untouched["total"] == "0", (path.name, untouched["notes"])
        n_exercises = sum(1 for k in untouched if k.startswith("ex "))
        assert untouched["notes"].count("not attempted") == n_exercises, untouched["notes"]


def test_prepare_replaces_checks_with_the_graders_own():
    nb, owned, points = prepare(submission(RIGHT, edit_checks="print('PASSED')"), nbformat.read(LAB, as_version=4))
    assert points == {"0.1": 1.0, "0.2": 1.0}
    assert sorted(owned.values()) == ["0.1", "0.2"]
    sources = [c.source for c in nb.cells]
    assert "print('PASSED')" not in sources
    ids = [c.id for c in nb.cells]
    for cell_id, ex in owned.items():  # each check sits right after its exercise
        exercise_cell = nb.cells[ids.index(cell_id) - 1]
        assert exercise_cell.metadata["course"]["exercise"] == ex


def test_find_lab_and_collect_errors(tmp_path):
    nb = nbformat.read(LAB, as_version=4)
    assert find_lab(nb, tmp_path / "anything.ipynb") == LAB
    del nb.metadata["course"]
    assert find_lab(nb, tmp_path / "alice_00_warmup.ipynb") == LAB
    with pytest.raises(ValueError, match="cannot tell which lab"):
        find_lab(nb, tmp_path / "alice.ipynb")
    with pytest.raises(ValueError, match="not a notebook"):
        collect([tmp_path / "missing.txt"])
    with pytest.raises(SystemExit):
        main([])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
