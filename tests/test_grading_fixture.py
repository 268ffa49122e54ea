"""A fixture chapter lab (42) built the way the chapter labs are: a warm-up without held-out cases, a predict
exercise with a top-level answer block and held-out cases, and an open challenge with a rubric. test_grade.py
grades it; the tests here check how a lab and the instructor's guide are made from it."""

import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from utils.course.labs import (
    GUIDE_BEGIN,
    GUIDE_END,
    LabError,
    guide_section,
    guide_text,
    lab_exercises,
    make_lab,
    write_labs,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "42_fixture"
ANSWER = "Matmuls accumulate in FP32 inside the kernel, so only the stored result is rounded to BF16."
RUBRIC = [{"criterion": "says where the accumulation happens and in which format", "points": 2},
          {"criterion": "names what is rounded and when", "points": 1}]
HIDDEN_42 = '''"""Held-out cases for the fixture lab 42."""
import torch

from utils.course.checks.warmup import expect_new_storage


def storage_cases(prediction, reasoning, new_storage_bytes):
    x = torch.zeros(10, 10, dtype=torch.float16)
    expect_new_storage(new_storage_bytes, [("lambda t: t[3:]", lambda t: t[3:], x, 0),
                                           ("lambda t: (t + 1)[:1]", lambda t: (t + 1)[:1], x, 200)])


HIDDEN = {"42.2": storage_cases}
'''


def _cell(kind, source, cell_id, course=None, tags=None):
    cell = (new_markdown_cell if kind == "md" else new_code_cell)(source)
    cell.id = cell_id
    if course is not None:
        cell.metadata["course"] = course
    if tags:
        cell.metadata["tags"] = tags
    return cell


def fixture_solution() -> nbformat.NotebookNode:
    return new_notebook(cells=[
        _cell("md", "# Lab 42 · A fixture\n\nExercises built the way the chapter labs are.", "f01"),
        _cell("code", "import torch\n\nfrom utils.course.checks.warmup import check_new_storage_bytes, "
                      "check_packed_bytes",
              "f02"),
        _cell("code", "def packed_bytes(shape, bits):\n    ### BEGIN SOLUTION\n"
                      "    rows = torch.Size(shape[:-1]).numel()\n"
                      "    return rows * (((shape[-1] if shape else 1) * bits + 7) // 8)\n"
                      "    ### END SOLUTION", "f03",
              {"exercise": "42.1", "points": 1, "kind": "warm-up", "task": "bytes of a tensor's elements",
               "assesses": "numel times element size", "minutes": 5, "mistakes": ["4 bytes for every dtype"]}),
        _cell("code", "check_packed_bytes(packed_bytes)", "f04", {"check": "42.1"}, ["check"]),
        _cell("code", "### BEGIN SOLUTION\nprediction = 512 * 256 * 2\nreasoning = ('a view, a contiguous copy, "
                      "then a BF16 copy that alone stays alive')\n### END SOLUTION\n\n\n"
                      "def new_storage_bytes(fn, x):\n    ### BEGIN SOLUTION\n    y = fn(x)\n"
                      "    if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():\n        return 0\n"
                      "    return y.untyped_storage().nbytes()\n    ### END SOLUTION", "f05",
              {"exercise": "42.2", "points": 3, "kind": "predict", "task": "predict, then measure new storage",
               "assesses": "views against copies", "minutes": 15, "memory_limit_mb": 256,
               "mistakes": ["comparing data_ptr() rather than the storage"]}),
        _cell("code", "check_new_storage_bytes(prediction, reasoning, new_storage_bytes)", "f06", {"check": "42.2"},
              ["check"]),
        _cell("md", "## Challenge 42.3\n\nWhy does BF16 training keep FP32 accuracy in matmuls?", "f07",
              {"exercise": "42.3", "points": 3, "kind": "challenge", "task": "explain FP32 accumulation",
               "minutes": 30, "rubric": RUBRIC}),
        _cell("md", ANSWER, "f08"),
    ], metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})


def build_fixture_course(tmp: Path) -> tuple[Path, Path, Path]:
    """solutions/ (the course's and the fixture), labs/ generated from them, hidden/ (the course's and ch42)."""
    solutions, labs, hidden = tmp / "solutions", tmp / "labs", tmp / "hidden"
    shutil.copytree(ROOT / "solutions", solutions)
    nbformat.write(fixture_solution(), solutions / f"{FIXTURE}.ipynb")
    write_labs(solutions, labs)
    shutil.copytree(ROOT / "grading" / "hidden", hidden, ignore=shutil.ignore_patterns("__pycache__"))
    (hidden / "ch42.py").write_text(HIDDEN_42)
    return labs, hidden, solutions


def test_the_fixture_lab_strips_answers_empties_the_challenge_and_shows_its_rubric():
    lab = make_lab(fixture_solution(), FIXTURE)
    cells = {c.id: c for c in lab.cells}
    assert cells["f05"].source.startswith("prediction = ...  # your answer here\nreasoning = ...  # your answer here")
    assert 'raise NotImplementedError("Exercise 42.2: predict, then measure new storage")' in cells["f05"].source
    assert ANSWER not in cells["f08"].source and "graded by hand" in cells["f08"].source
    assert cells["f08"].metadata["course"] == {"answer": "42.3"}
    assert "**Rubric** (3 points, graded by hand):" in cells["f07"].source
    assert "- names what is rounded and when (1 point)" in cells["f07"].source
    exercises = lab_exercises(lab, FIXTURE)  # a generated lab still describes its exercises
    assert [(e.id, e.kind, e.points, e.by_hand) for e in exercises] == [
        ("42.1", "warm-up", 1, False), ("42.2", "predict", 3, False), ("42.3", "challenge", 3, True)]


def test_the_guide_lists_every_exercise_with_its_rubric(tmp_path):
    (tmp_path / "ch42.py").write_text(HIDDEN_42)
    section = guide_section({FIXTURE: make_lab(fixture_solution(), FIXTURE)}, tmp_path)
    assert section.startswith(GUIDE_BEGIN) and section.endswith(GUIDE_END)
    assert "2 autograded exercises worth 4 points, plus 3 points of open challenges graded by hand" in section
    assert "| 42.2 | predict | 3 | 15 | yes | 256 MiB | views against copies |" in section
    assert "| 42.1 | warm-up | 1 | 5 | no | - | numel times element size |" in section
    assert "| 42.3 | challenge | 3 | 30 | by hand | - | explain FP32 accumulation |" in section
    assert "- says where the accumulation happens and in which format (2)" in section
    assert "- comparing data_ptr() rather than the storage" in section
    # regenerating keeps the hand-written parts around the generated one
    text = guide_text(f"# Guide\n\nhand-written\n\n{GUIDE_BEGIN}\nold\n{GUIDE_END}\n\n## After\n", {})
    assert text.startswith("# Guide\n\nhand-written\n\n" + GUIDE_BEGIN) and text.endswith(GUIDE_END + "\n\n## After\n")


@pytest.mark.parametrize(("change", "match"), [
    (lambda c: c.update(points=0), "course.points must be a positive number"),
    (lambda c: c.update(points=True), "course.points must be a positive number"),
    (lambda c: c.update(points=float("nan")), "course.points must be a positive number"),
    (lambda c: c.update(rubric=[]), "needs metadata course.rubric"),
    (lambda c: c.update(rubric=[{"criterion": "x", "points": 1}]), "add up to 1, not the challenge's 3"),
    (lambda c: c.update(rubric=["x"]), "each rubric entry must be a mapping"),
    (lambda c: c.update(minutes="ten"), "course.minutes must be a positive number"),
    (lambda c: c.update(mistakes="one"), "course.mistakes must be a list"),
    (lambda c: c.update(exercise="42.x"), "must be an id such as '5.2'"),
])
def test_bad_challenge_metadata_is_named(change, match):
    nb = fixture_solution()
    change(nb.cells[6].metadata["course"])
    with pytest.raises(LabError, match=match):
        make_lab(nb, FIXTURE)


def test_bad_exercise_structure_is_named():
    nb = fixture_solution()
    nb.cells[5].source = "v = check_new_storage_bytes(prediction, reasoning, new_storage_bytes)"
    with pytest.raises(LabError, match="exactly one call"):
        make_lab(nb, FIXTURE)
    nb = fixture_solution()
    nb.cells[4].source = nb.cells[4].source.replace("prediction = 512 * 256 * 2", "for i in range(3):\n    pass")
    with pytest.raises(LabError, match="only assignments"):
        make_lab(nb, FIXTURE)
    nb = fixture_solution()
    del nb.cells[7]
    with pytest.raises(LabError, match="followed by a free answer cell"):
        make_lab(nb, FIXTURE)
    nb = fixture_solution()
    nb.cells[4].metadata["course"]["memory_limit_mb"] = -1
    with pytest.raises(LabError, match="course.memory_limit_mb"):
        make_lab(nb, FIXTURE)
