"""The course's commands on bad arguments and broken files: a non-zero exit and one line naming what is at fault,
never a traceback and never a silent success."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def broken_solutions(tmp_path: Path) -> dict[str, Path]:
    folders = {}
    for name, text in (("invalid-json", "{not json"), ("empty-object", "{}"), ("list", "[]")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "01_broken.ipynb").write_text(text)
        folders[name] = folder
    return folders


@pytest.mark.parametrize(("args", "named"), [
    (("utils.course.labs", "--solutions", "no-such-folder", "--check"), "no-such-folder"),
    (("utils.course.labs", "--solutions", "no-such-folder"), "no-such-folder"),
    (("utils.course.grade", "--time-limit", "nan", "labs"), "time-limit"),
    (("utils.course.grade", "--time-limit", "inf", "labs"), "time-limit"),
    (("utils.course.grade", "--time-limit", "-5", "labs"), "time-limit"),
    (("utils.course.grade", "no-such-submissions"), "no-such-submissions"),
    (("utils.lessons.estimate", "--no-such-option"), "--no-such-option"),
    (("utils.course.results", "--claims", "--root", "no-such-results"), "no-such-results"),
    (("utils.course.outputs", "--only", "77"), "--only"),
    (("utils.course.hosted",), "--apply"),
    (("utils.course.glossary",), "--apply"),
])
def test_bad_arguments_fail_with_one_line(args: tuple[str, ...], named: str) -> None:
    out = run(*args)
    assert out.returncode != 0, f"{' '.join(args)} exited 0: {out.stdout[-500:]}"
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-2000:]
    assert named in out.stderr, f"stderr does not name {named!r}: {out.stderr!r}"


@pytest.mark.parametrize("kind", ["invalid-json", "empty-object", "list"])
def test_labs_check_names_a_broken_solution_file(tmp_path: Path, kind: str) -> None:
    folder = broken_solutions(tmp_path)[kind]
    out = run("utils.course.labs", "--check", "--solutions", str(folder), "--labs", str(tmp_path / "labs"))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-2000:]
    assert "01_broken.ipynb" in out.stderr


def test_gpu_check_without_a_gpu_says_so_in_one_line() -> None:
    out = run("utils.course.gpu_check")
    assert out.returncode != 0
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "GPU" in lines[0], lines
