"""Issue 34, the instructor's side of the lab flow: what `make grade` and `make nbgrader` say, where submissions go,
and a guide whose commands and file names are the real ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")


def test_submissions_are_ignored_by_git() -> None:
    done = subprocess.run(["git", "check-ignore", "-q", "submissions/alice_lab03.ipynb"], cwd=ROOT)
    assert done.returncode == 0, "submissions/ (make grade's default folder) must be in .gitignore"


def test_make_grade_says_it_runs_untrusted_code() -> None:
    dry = subprocess.run(["make", "-n", "grade", "STAMP="], cwd=ROOT, capture_output=True, text=True)
    assert "untrusted code" in dry.stdout and "container" in dry.stdout, dry.stdout


def test_make_nbgrader_prints_the_next_step(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "utils.course.labs", "--nbgrader", str(tmp_path / "nb")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "make nbgrader-env" in done.stdout and "make nbgrader-run ARGS='autograde" in done.stdout


def test_the_guide_names_real_files_and_commands_that_work() -> None:
    assert "labs/NN_" not in GUIDE and "labs/labNN_*.ipynb" in GUIDE
    assert not re.search(r"^nbgrader (generate_assignment|autograde)", GUIDE, re.M), "plain nbgrader is not on PATH"
    assert ".venv/bin/pip install \"nbgrader" not in GUIDE, "nbgrader in the course's venv adds menus for learners"
    for target in ("nbgrader-env", "nbgrader-run"):
        assert f"make {target}" in GUIDE
        assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(), re.M), target
