"""`make reset-chapter` / `make reset-lab` while the notebook is open: one line, no traceback. Under
`python -m utils.lab_server` the module runs as __main__, so the LabOpen that utils.lab_contents raises (the imported
module's class) was not the class main() caught, and a learner saw a traceback (found by an outside review)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import runpy, sys
import utils.lab_contents, utils.lab_server
def refuse(self, number):
    raise utils.lab_server.LabOpen("notebooks/00_x.ipynb is open in the JupyterLab at http://127.0.0.1:1/")
utils.lab_contents.MyWork.reset_chapter = refuse
sys.argv = ["utils.lab_server", "--reset-chapter=00"]
runpy.run_module("utils.lab_server", run_name="__main__")
"""


def test_reset_chapter_refuses_in_one_line_when_run_as_a_module() -> None:
    out = subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning", "-c", RUN], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "utils.lab_server: notebooks/00_x.ipynb is open in the JupyterLab at http://127.0.0.1:1/"]
