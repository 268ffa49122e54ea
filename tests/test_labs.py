"""Lab generation from solutions: answers stripped, outputs cleared, learners' edits protected, sync checked."""

import shutil
from pathlib import Path

import nbformat
import pytest

from utils.course.labs import (
    BEGIN,
    END,
    GUIDE,
    LabError,
    check_labs,
    lab_exercises,
    main,
    make_lab,
    read_notebook,
    strip_solution,
    write_labs,
)

ROOT = Path(__file__).resolve().parent.parent


def test_labs_folder_and_guide_are_in_sync_with_solutions():
    assert check_labs(guide=GUIDE) == [], "run `python -m utils.course.labs` (labs/ and docs/instructors.md)"


def test_top_level_answers_become_placeholders():
    source = f"{BEGIN}\nprediction = 3 * 4\nreasoning: str = 'because'\n{END}\nprint(prediction)"
    assert strip_solution(source, "1.1", "t") == (
        "prediction = ...  # your answer here\nreasoning = ...  # your answer here\nprint(prediction)")


def test_strip_solution_keeps_everything_else():
    source = f"def f(x):\n    '''doc'''\n    {BEGIN}\n    return x + 1\n    {END}\n\nprint('after')"
    assert strip_solution(source, "1.2", "add one") == (
        "def f(x):\n    '''doc'''\n    raise NotImplementedError(\"Exercise 1.2: add one\")\n\nprint('after')")


@pytest.mark.parametrize(("source", "match"), [
    (f"{BEGIN}\nfor i in range(3):\n    x = i\n{END}", "outside a function body"),
    (f"{BEGIN}\nx, y = 1, 2\n{END}", "outside a function body"),
    (f"{BEGIN}\nx = (\n{END}", "not valid Python"),
    (f"def f():\n    {BEGIN}\n    return 1", "never closed"),
    (f"def f():\n    {END}", "never opened"),
    (f"def f():\n    {BEGIN}\n    {BEGIN}\n    {END}", "inside another"),
])
def test_strip_solution_rejects_malformed_blocks(source, match):
    with pytest.raises(LabError, match=match):
        strip_solution(source, "1.1", "task")


def test_every_solution_declares_points_and_kinds_for_the_guide():
    """Every exercise has points and a task; the course has 40 or more autograded exercises once the chapter labs
    are complete (checked in test_course_has_forty_graded_exercises when they are)."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for exercise in lab_exercises(read_notebook(path), path.stem):
            assert exercise.points > 0 and exercise.task, (path.name, exercise.id)


def test_every_check_cell_is_tagged_check():
    """Review s14 R20: nine check cells carried the course's `check` metadata but not Jupyter's `check` tag, which the
    other check cells of every lab carry (tag-based tools and a learner's view treated them differently)."""
    for folder in ("solutions", "labs"):
        for path in sorted((ROOT / folder).glob("lab*.ipynb")):
            for cell in read_notebook(path).cells:
                if "check" in cell.metadata.get("course", {}):
                    assert "check" in cell.metadata.get("tags", []), (path.name, cell.get("id"))


def test_every_lab_answer_is_replaced_and_outputs_cleared():
    for solution_path in sorted((ROOT / "solutions").glob("*.ipynb")):
        lab = make_lab(nbformat.read(solution_path, as_version=4), solution_path.stem)
        sources = "\n".join(c.source for c in lab.cells)
        assert BEGIN not in sources and END not in sources
        exercises = [c.metadata["course"]["exercise"] for c in lab.cells if "exercise" in c.metadata.get("course", {})]
        assert exercises, f"{solution_path.name} has no exercises"
        for ex in exercises:
            kind = next(c for c in lab.cells if c.metadata.get("course", {}).get("exercise") == ex)
            if kind.metadata["course"].get("kind") != "challenge":
                assert f'NotImplementedError("Exercise {ex}: ' in sources or "= ...  # your answer here" in sources
        assert all(c.outputs == [] and c.execution_count is None for c in lab.cells if c.cell_type == "code")


def _copy_course(tmp_path: Path) -> tuple[Path, Path]:
    solutions, labs = tmp_path / "solutions", tmp_path / "labs"
    shutil.copytree(ROOT / "solutions", solutions)
    shutil.copytree(ROOT / "labs", labs)
    return solutions, labs


def test_stale_lab_fails_the_check_until_make_labs(tmp_path, capsys):
    solutions, labs = _copy_course(tmp_path)
    path = solutions / "lab00_warmup.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\n\nA new sentence in the solution."
    nbformat.write(nb, path)
    guide = tmp_path / "guide.md"
    assert main(["--guide", "--solutions", str(solutions), "--guide-file", str(guide)]) == 0
    assert main(["--check", "--solutions", str(solutions), "--labs", str(labs), "--guide-file", str(guide)]) == 1
    assert "labs/lab00_warmup.ipynb is out of date" in capsys.readouterr().out
    assert main(["--solutions", str(solutions), "--labs", str(labs), "--guide-file", str(guide)]) == 0
    assert check_labs(solutions, labs, guide) == []
    (labs / "99_orphan.ipynb").write_text((labs / "lab00_warmup.ipynb").read_text())
    assert "has no solutions/99_orphan.ipynb" in check_labs(solutions, labs)[0]
    (labs / "lab00_warmup.ipynb").unlink()
    assert "missing" in check_labs(solutions, labs)[0]


def test_a_learners_edited_lab_is_not_overwritten_without_force(tmp_path, capsys):
    solutions, labs = _copy_course(tmp_path)
    lab_path = labs / "lab00_warmup.ipynb"
    lab = nbformat.read(lab_path, as_version=4)
    exercise = next(c for c in lab.cells if "exercise" in c.metadata.get("course", {}))
    exercise.source = exercise.source.replace("raise NotImplementedError", "return 0  #")
    nbformat.write(lab, lab_path)
    sol = nbformat.read(solutions / "lab00_warmup.ipynb", as_version=4)
    sol.cells[0].source += " (changed)"
    nbformat.write(sol, solutions / "lab00_warmup.ipynb")
    with pytest.raises(LabError, match="lab00_warmup.ipynb was edited since it was generated"):
        write_labs(solutions, labs)
    assert main(["--solutions", str(solutions), "--labs", str(labs), "--guide-file", str(tmp_path / "g.md")]) == 1
    assert "--force" in capsys.readouterr().err
    assert "return 0  #" in lab_path.read_text()
    write_labs(solutions, labs, force=True)
    assert check_labs(solutions, labs) == []


def test_solution_structure_errors_are_named():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"def f():\n    {BEGIN}\n    pass\n    {END}")])
    with pytest.raises(LabError, match="no metadata course.exercise"):
        make_lab(nb, "x")
    nb.cells[0].metadata["course"] = {"exercise": "1.1", "task": "t"}
    with pytest.raises(LabError, match="followed by its check cell"):
        make_lab(nb, "x")
    nb.cells[0].metadata["course"] = {"exercise": "1.1"}
    with pytest.raises(LabError, match="course.task"):
        make_lab(nb, "x")


@pytest.mark.parametrize("content", ["{ not json", "{}", "[]", '{"cells": 3}', "", "\x00\xff"])
def test_a_broken_solution_notebook_fails_the_check_with_one_line_naming_it(tmp_path, capsys, content):
    solutions, labs = tmp_path / "solutions", tmp_path / "labs"
    solutions.mkdir()
    shutil.copy(ROOT / "solutions" / "lab00_warmup.ipynb", solutions)
    (solutions / "05_broken.ipynb").write_text(content, encoding="latin-1")
    assert main(["--check", "--solutions", str(solutions), "--labs", str(labs)]) == 1
    err = capsys.readouterr().err.strip()
    assert "05_broken.ipynb" in err and "\n" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("args", [["--solutions", "no-such-folder"], ["--check", "--solutions", "no-such-folder"],
                                  ["--guide", "--solutions", "no-such-folder"]])
def test_a_missing_solutions_folder_is_an_error_not_in_sync(args, capsys):
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert "no-such-folder" in err and "\n" not in err


def test_an_empty_solutions_folder_is_an_error(tmp_path, capsys):
    assert main(["--check", "--solutions", str(tmp_path)]) == 1
    assert "holds no solution notebooks" in capsys.readouterr().err


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="source"):
        strip_solution(None, "1.1", "t")
    with pytest.raises(ValueError, match="task"):
        strip_solution("x", "1.1", " ")
    with pytest.raises(TypeError, match="solution"):
        make_lab([], "x")
    with pytest.raises(TypeError, match="path"):
        read_notebook(3)
    with pytest.raises(SystemExit):
        main(["--no-such-option"])


def test_the_course_has_forty_autograded_exercises_and_a_challenge_per_chapter_lab():
    """Issue 16: 40 or more autograded exercises in the course; each chapter lab 01-09 at least four of them and
    one open challenge with a rubric."""
    total, short = 0, []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        exercises = lab_exercises(read_notebook(path), path.stem)
        auto = [e for e in exercises if not e.by_hand]
        total += len(auto)
        if not path.stem.startswith("lab00") and (len(auto) < 4 or not any(e.by_hand for e in exercises)):
            short.append(f"{path.stem}: {len(auto)} autograded, {sum(e.by_hand for e in exercises)} challenge(s)")
    assert total >= 40 and not short, f"{total} autograded exercises; short: {short}"


def test_every_chapter_lab_has_three_transfer_exercises():
    """Issue 24: in each chapter lab (01-10) at least three autograded exercises carry the chapter's idea to something
    it did not show (their `course.transfer` metadata says what), and the guide lists what each transfers to."""
    short = []
    for path in sorted(p for p in (ROOT / "solutions").glob("lab[0-9][0-9]_*.ipynb") if p.name[3:5] != "00"):
        transfer = [e for e in lab_exercises(read_notebook(path), path.stem) if e.transfer and not e.by_hand]
        if len(transfer) < 3:
            short.append(f"{path.stem}: {[e.id for e in transfer]}")
    assert not short, short
    guide = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    assert "| transfers to |" in guide and "LoRA fine-tuning" in guide
