"""`make nbgrader` (python -m utils.course.labs --nbgrader DIR) writes the labs as an nbgrader course folder; nbgrader's
own `generate_assignment` and `autograde` then give every exercise the points `make grade` gives it, for a solution and
for an untouched lab (nbgrader is installed for the test into build/nbgrader-site where the environment lacks it, so CI
runs it end to end). Every lab's exported metadata is also checked against nbgrader's schema (v3)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from platform_tier import only_in_platforms

from utils.course.grade import autograded_points, grade_notebook
from utils.course.labs import LABS_DIR, SOLUTIONS_DIR, lab_exercises, nbgrader_source, read_notebook, write_nbgrader

LAB = "lab03_loss_scaling"  # a lab whose every exercise has held-out cases, and a challenge
GRADE_ID = r"^[a-zA-Z0-9_\-]*$"  # nbgrader's schema v3


def _metadata(nb: nbformat.NotebookNode) -> list[dict]:
    return [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]


@pytest.mark.parametrize("path", sorted(SOLUTIONS_DIR.glob("*.ipynb")), ids=lambda p: p.stem)
def test_exported_metadata_follows_nbgraders_schema(path: Path) -> None:
    import re

    nb = nbgrader_source(read_notebook(path), path.stem)
    cells = _metadata(nb)
    ids = [m["grade_id"] for m in cells]
    assert len(ids) == len(set(ids)) and all(re.match(GRADE_ID, i) for i in ids)
    for m in cells:
        assert m["schema_version"] == 3 and set(m) >= {"grade", "solution", "locked", "grade_id", "task"}
        assert not (m["grade"] and not m["solution"]) or m["locked"]  # a test cell is read-only
        assert ("points" in m) == m["grade"]
    exercises = lab_exercises(read_notebook(path), path.stem)
    autograded = sum(m["points"] for m in cells if m["grade"] and not m["solution"])
    assert autograded == pytest.approx(sum(autograded_points(e) for e in exercises if not e.by_hand))
    by_hand = sum(m["points"] for m in cells if m["grade"] and m["solution"])
    assert by_hand == pytest.approx(sum(e.points for e in exercises if e.by_hand)
                                    + sum(e.points - autograded_points(e) for e in exercises if not e.by_hand))
    hidden = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-hidden")]
    assert all(s.startswith("### BEGIN HIDDEN TESTS") and s.endswith("### END HIDDEN TESTS") for s in hidden)


NBGRADER_SITE = Path(__file__).resolve().parents[1] / "build" / "nbgrader-site"
NBGRADER_PIN = "nbgrader==0.9.*"
# nbgrader 0.9's requirements that requirements.txt does not already bring (the rest come with jupyterlab/nbclient).
NBGRADER_MISSING = ["alembic", "sqlalchemy", "mako", "greenlet", "rapidfuzz", "notebook"]


def _nbgrader() -> tuple[list[str], dict[str, str]]:
    """The command that runs nbgrader and its environment. nbgrader is not a course requirement (it adds menus to
    every learner's JupyterLab), so where this environment lacks it, it is installed once into build/nbgrader-site
    (pip --target, about 30 s) and put on PYTHONPATH for nbgrader's processes only. Skipped only where that
    install fails outside CI; in CI (CI=true) that is a failure."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    env.pop("COURSE_CHECKS_STRICT", None)
    command = [sys.executable, "-c", "from nbgrader.apps.nbgraderapp import main; main()"]
    if importlib.util.find_spec("nbgrader") is not None:
        return command, env
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NBGRADER_SITE), env.get("PYTHONPATH")]))
    env["PATH"] = f"{NBGRADER_SITE / 'bin'}{os.pathsep}{env['PATH']}"  # nbgrader runs the `alembic` command
    works = [sys.executable, "-c", "import nbgrader.apps.nbgraderapp, nbgrader.api"]
    # First only what the course's environment lacks (a few seconds); if nbgrader still does not import, all of
    # its dependencies (about 30 s).
    for extra in (["--no-deps", *NBGRADER_MISSING], []):
        if subprocess.run(works, env=env, capture_output=True, timeout=120).returncode == 0:
            return command, env
        shutil.rmtree(NBGRADER_SITE, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(NBGRADER_SITE),
                               NBGRADER_PIN, *extra], capture_output=True, text=True, timeout=600)
    if subprocess.run(works, env=env, capture_output=True, timeout=120).returncode == 0:
        return command, env
    message = f"could not install {NBGRADER_PIN} into {NBGRADER_SITE}: {done.stderr.strip()[-300:]}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _gradebook_scores(course: Path, command: list[str], env: dict[str, str]) -> dict[str, list[list]]:
    """(grade name, score) per student, read with nbgrader's own Gradebook in nbgrader's environment."""
    script = ("import json, sys; from nbgrader.api import Gradebook\n"
              f"with Gradebook('sqlite:///{course / 'gradebook.db'}') as gb:\n"
              f"    print(json.dumps({{s: [[g.name, g.score] for g in gb.find_submission({LAB!r}, s).notebooks[0]"
              ".grades] for s in ('solution', 'untouched')}))")
    done = subprocess.run([command[0], "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _by_exercise(grades: list[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, points in grades:
        exercise = name.removeprefix("ex").rsplit("-", 1)[0].replace("_", ".")
        out[exercise] = out.get(exercise, 0.0) + points
    return out


@pytest.mark.slow
@only_in_platforms
def test_nbgrader_scores_equal_make_grade(tmp_path: Path) -> None:
    nbgrader, env = _nbgrader()
    course = tmp_path / "course"
    write_nbgrader(course)
    run = subprocess.run([*nbgrader, "generate_assignment", LAB, "--force"], cwd=course, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    release = course / "release" / LAB / f"{LAB}.ipynb"
    assert "HIDDEN" not in release.read_text()  # the held-out cases never reach the students
    for student, source in (("solution", course / "source" / LAB / f"{LAB}.ipynb"), ("untouched", release)):
        (course / "submitted" / student / LAB).mkdir(parents=True)
        shutil.copy(source, course / "submitted" / student / LAB / f"{LAB}.ipynb")
    run = subprocess.run([*nbgrader, "autograde", LAB, "--force"], cwd=course, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    nbgrader_scores = {student: _by_exercise([(name, score) for name, score in grades if not name.endswith("-answer")])
                       for student, grades in _gradebook_scores(course, nbgrader, env).items()}
    for student, path in (("solution", SOLUTIONS_DIR / f"{LAB}.ipynb"), ("untouched", LABS_DIR / f"{LAB}.ipynb")):
        made = grade_notebook(path, time_limit_s=600)
        assert {e.exercise: e.points for e in made.exercises if not e.by_hand} == nbgrader_scores[student], student
    assert sum(nbgrader_scores["solution"].values()) > 0 == sum(nbgrader_scores["untouched"].values())
