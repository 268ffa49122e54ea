"""`make reset-chapter` / `make reset-lab` while the notebook is open: one line, no traceback. Under
`python -m utils.course.lab_server` the module runs as __main__; the LabOpen that utils.course.lab_contents raises
must still be the class main() catches (an outside review found a traceback when LabOpen lived in the module run as
__main__; it lives in utils.course.lab_sessions now)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import runpy, sys
import utils.course.lab_contents, utils.course.lab_sessions
def refuse(self, number):
    raise utils.course.lab_sessions.LabOpen("notebooks/00_x.ipynb is open in the JupyterLab at http://127.0.0.1:1/")
utils.course.lab_contents.MyWork.reset_chapter = refuse
sys.argv = ["utils.course.lab_server", "--reset-chapter=00"]
runpy.run_module("utils.course.lab_server", run_name="__main__")
"""


def test_reset_chapter_refuses_in_one_line_when_run_as_a_module() -> None:
    out = subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning", "-c", RUN], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "utils.course.lab_server: notebooks/00_x.ipynb is open in the JupyterLab at http://127.0.0.1:1/"]
