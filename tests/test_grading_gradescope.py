"""The Gradescope autograder zip: its two required scripts at the root (executable) and the grader's files."""

import runpy
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "grading" / "gradescope" / "build_zip.py"


def test_the_autograder_zip_holds_what_gradescope_and_the_grader_need(tmp_path):
    target = tmp_path / "autograder.zip"
    names = runpy.run_path(str(BUILD))["build"](target)
    with zipfile.ZipFile(target) as zf:
        listed = zf.namelist()
        for script in ("setup.sh", "run_autograder"):
            assert script in listed and (zf.getinfo(script).external_attr >> 16) & 0o111
    assert listed == names
    for needed in ("utils/course/grade.py", "utils/course/labs.py", "grading/runner.py", "grading/hidden/ch00.py",
                   "labs/lab00_warmup.ipynb", "pyproject.toml", "requirements.txt", "Makefile"):
        assert needed in listed, needed
    assert not any("__pycache__" in n or n.startswith("solutions/") for n in listed)


def test_the_gradescope_scripts_are_valid_bash():
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(ROOT / "grading" / "gradescope" / script)], check=True)
