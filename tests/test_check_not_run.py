"""A check cell run before its exercise cell says "not attempted: run the exercise cell first" in one line, not a
NameError traceback; a NameError anywhere else still shows IPython's traceback. A lab copied before the course moved
its modules (issue 38) says where the module is now and how to take a fresh copy."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from utils.course.kernels import notebook_client_config

ROOT = Path(__file__).resolve().parent.parent


def _outputs(*sources: str) -> list[list]:
    """Each cell's outputs, the cells run in order in a fresh kernel (errors allowed)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    NotebookClient(nb, timeout=120, allow_errors=True, config=notebook_client_config()).execute(cwd=str(ROOT))
    return [cell.outputs for cell in nb.cells]


def test_check_before_exercise_is_not_attempted() -> None:
    _, first, missing_import, plain = _outputs("from utils.course.checks.ch03 import check_scaler",
                                               "check_scaler(Scaler)", "check_window(scale_window)",
                                               "undefined_thing + 1")
    assert [o.output_type for o in first] == ["stream"], first
    assert "NOT ATTEMPTED" in first[0].text and "`Scaler`" in first[0].text and "exercise cell" in first[0].text
    assert "NOT ATTEMPTED" in missing_import[0].text and "first code cell" in missing_import[0].text
    assert [o.output_type for o in plain] == ["error"] and plain[0].ename == "NameError"


def test_an_import_of_a_moved_module_says_where_it_is_and_how_to_refresh_the_lab() -> None:
    """A learner's my-labs/ copy made before the package's halves existed imports `utils.checks.ch03`: the kernel
    says it moved to utils.course.checks.ch03 and how to take a fresh copy; any other missing module keeps its
    traceback."""
    _, checks, plan, other = _outputs("import utils.course.checks.not_run",
                                      "from utils.checks.ch03 import check_scaler", "from utils.plan import Choice",
                                      "import no_such_module_anywhere")
    assert [o.output_type for o in checks] == ["stream"], checks
    assert "`utils.course.checks.ch03`" in checks[0].text and "make reset-lab N=03" in checks[0].text
    assert "`utils.ledger.plan`" in plan[0].text
    assert [o.output_type for o in other] == ["error"] and other[0].ename == "ModuleNotFoundError"
